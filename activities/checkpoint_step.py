"""The built-in step ``recovery.verify_checkpoint``: verify the checkpoint the job will
resume from and fall back past damaged ones, in a helper process running as the job's owner
(resurrect.checkpoint.helper). Quick: its first attempt runs for a few seconds as a local
activity, then again as an activity task when that is not enough (``activities/steps.py``
says how quick steps run)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from resurrect.activities.steps import Params
from resurrect.contracts import CheckpointVerdict, RecoveryOutcomeKind, StepResult
from resurrect.numbers import is_ascii_digits
from resurrect.steps.runtime import StepContext, step

#: The helper's deadline when the step runs outside an activity (tests, tools).
CHECKPOINT_TIMEOUT_S = 600.0


def _time_left_s(default: float) -> float:
    """Seconds until this activity's start-to-close deadline (a few kept to report)."""
    from temporalio import activity

    try:
        info = activity.info()
    except RuntimeError:
        return default
    timeout = info.start_to_close_timeout or info.schedule_to_close_timeout
    if timeout is None:
        return default
    elapsed = (datetime.now(UTC) - info.started_time).total_seconds()
    return max(1.0, timeout.total_seconds() - max(0.0, elapsed) - 2.0)


class VerifyParams(Params):
    level: Literal["quick", "full"] | None = None  # default: recovery.checkpoint_level


@step("recovery.verify_checkpoint", handles_observe=True, quick=True)
async def verify_checkpoint(ctx: StepContext, params: VerifyParams) -> StepResult:
    """Verify the checkpoint the job will resume from; fall back past damaged ones."""
    root_text = ctx.input.bundle.policy.checkpoint_dir
    if not root_text:
        verdict = CheckpointVerdict(
            root=None, verified=False, note="no checkpoint_dir in the job's policy: not verified"
        )
        return StepResult(detail=verdict.note, checkpoint=verdict)
    root = Path(root_text)
    if not root.is_absolute() and ctx.job.work_dir:
        root = Path(ctx.job.work_dir) / root
    from resurrect.checkpoint.as_owner import run_helper
    from resurrect.checkpoint.helper import HelperRequest

    # The job names its own checkpoint_dir: every file in it is read and written by a
    # helper process running as the job's owner, killed when this activity ends.
    request = HelperRequest(
        op="prepare",
        root=str(root),
        level=params.level or ctx.input.bundle.checkpoint_level,
        act=not ctx.observe,
        owner_uid=ctx.job.user_id,
        owner_gid=ctx.job.group_id,
        # the attempt this recovery requeues: what it writes from now on is never resumed
        fence_job_id=ctx.job.job_id if is_ascii_digits(ctx.job.job_id) else None,
        fence_attempt=ctx.input.bundle.interruption.restart_count,
        # what an earlier attempt of this step set aside before it was stopped is reported
        set_aside_since=ctx.input.bundle.interruption.observed_at.timestamp(),
    )
    verdict = await run_helper(
        request,
        timeout_s=_time_left_s(CHECKPOINT_TIMEOUT_S)
        if ctx.quick_s is None
        else CHECKPOINT_TIMEOUT_S,
        progress=ctx.heartbeat,
        quick_s=ctx.quick_s,
    )
    result = StepResult(
        checkpoint=verdict, detail=verdict.note or f"resume from {verdict.latest_valid}"
    )
    if ctx.observe and verdict.quarantined:
        result.would_have.append(f"would quarantine {', '.join(verdict.quarantined)}")
    if (
        verdict.verified
        and verdict.latest_valid is None
        and not ctx.input.bundle.policy.allow_restart_from_scratch
    ):
        result.stop_recovery = True
        result.outcome = RecoveryOutcomeKind.STOPPED_NO_CHECKPOINT
        result.notes.append(
            "no intact checkpoint and the job does not allow a restart from scratch"
        )
    return result
