"""How a workflow calls its activities: as an activity task, as a local activity, or as a
local activity first (a few seconds, no retries) and then, if that was not enough, as an
activity task with the whole timeouts and retry policy.

A local activity that needs longer raises ``NeedsMoreTime`` (a benign failure); one that
failed in a way another attempt cannot mend (a non-retryable error) is not tried again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    from resurrect.errors import non_retryable_error_types

# How a failed activity reaches the workflow: wrapped in ActivityError, or (a local
# activity's) as the step's own error or timeout.
ACTIVITY_FAILURES = (ActivityError, ApplicationError, ActivityTimeoutError)
# A local activity waits longer than this before its next attempt on a durable timer, not
# in the worker (a controller down for minutes must not hold a workflow task open).
LOCAL_RETRY_THRESHOLD = timedelta(seconds=2)
# A first attempt as a local activity gets this long (the call checks it itself: quick_s),
# and is cut this much later; it is not retried locally (the activity task retries).
QUICK_S = 3.0
QUICK_GRACE_S = 5.0
FIRST_ATTEMPT_ONLY = RetryPolicy(maximum_attempts=1)
_NON_RETRYABLE = frozenset(non_retryable_error_types())
ResultT = TypeVar("ResultT")


def underlying_error(err: BaseException) -> BaseException | None:
    """What a failed activity failed with: the error itself (a local activity's own error)
    or what its ActivityError wraps."""
    return err if isinstance(err, ApplicationError) else err.__cause__


def failed_for_good(err: BaseException) -> bool:
    """The activity failed in a way another attempt cannot mend (a non-retryable error)."""
    cause = underlying_error(err)
    return isinstance(cause, ApplicationError) and (
        cause.non_retryable or (cause.type or "") in _NON_RETRYABLE
    )


def describe_failure(err: BaseException) -> str:
    """A failed activity's error as people read it: ``Type: message``."""
    cause = underlying_error(err)
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause or err)


class ActivityCalls:
    """A workflow's activity calls. ``notes`` gets a line when a local first attempt gives
    way to an activity task; ``before_waiting`` runs before the workflow waits for an
    activity task (to publish what changed while the workflow task ran)."""

    def __init__(self, notes: list[str], before_waiting: Callable[[], None]) -> None:
        self._notes = notes
        self._before_waiting = before_waiting

    async def run(
        self,
        name: str,
        args: list[object],
        result_type: type[ResultT],
        *,
        local: bool,
        timeout: timedelta,
        deadline: timedelta,
        heartbeat: timedelta | None,
        retry: RetryPolicy,
    ) -> ResultT:
        """Run activity ``name`` as a local activity (``local``: no heartbeat) or as an
        activity task."""
        options: dict[str, Any] = {
            "args": args,
            "result_type": result_type,
            "start_to_close_timeout": timeout,
            "schedule_to_close_timeout": deadline,
            "retry_policy": retry,
        }
        if local:
            local_result: ResultT = await workflow.execute_local_activity(
                name, **options, local_retry_threshold=LOCAL_RETRY_THRESHOLD
            )
            return local_result
        self._before_waiting()
        result: ResultT = await workflow.execute_activity(
            name, **options, heartbeat_timeout=heartbeat
        )
        return result

    async def quick_first(
        self,
        name: str,
        quick_arg: object,
        arg: object,
        result_type: type[ResultT],
        *,
        timeout: timedelta,
        deadline: timedelta,
        heartbeat: timedelta | None,
        retry: RetryPolicy,
    ) -> ResultT:
        """A quick call: activity ``name`` tried once as a local activity (``quick_arg`` carries
        ``quick_s``), then, unless that failed for good, as an activity task (``arg``)."""
        try:
            quick: ResultT = await workflow.execute_local_activity(
                name,
                args=[quick_arg],
                result_type=result_type,
                start_to_close_timeout=min(timeout, timedelta(seconds=QUICK_S + QUICK_GRACE_S)),
                retry_policy=FIRST_ATTEMPT_ONLY,
            )
            return quick
        except ACTIVITY_FAILURES as err:
            if failed_for_good(err):
                raise
            self._notes.append(f"{name}: {describe_failure(err)}; run as an activity task")
        return await self.run(
            name,
            [arg],
            result_type,
            local=False,
            timeout=timeout,
            deadline=deadline,
            heartbeat=heartbeat,
            retry=retry,
        )
