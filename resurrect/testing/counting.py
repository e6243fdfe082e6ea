"""Counting what recoveries ask of Temporal and of the scheduler, for cost tests and
benchmarks: the counts per recovery must not grow with the fleet or with recoveries in flight.

* :func:`count_temporal_calls` wraps a real :class:`temporalio.client.Client`'s service
  client: every RPC it sends (workflow queries, history fetches, visibility lists and
  counts, signals, starts, updates) is counted by name, and by kind (:data:`RPC_KINDS`),
  with the bytes of its request (what a call carries: a reservation that carried every
  node resurrect keeps out was one call, but not one call's bytes).
  A worker built on that client counts too: the activities use it (the worker's own polls
  go through the SDK's core and are not counted).
* :func:`count_scheduler_calls` wraps a scheduler's methods in place: calls by method, and
  the rows its list reads returned (a full read of a 50,000-job queue is one call but not
  one row).
* :func:`counted` wraps a plain function: for work a recovery does per item without a call
  to anyone (the lemon scores it computes: one per node it scores).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from google.protobuf.message import Message
from temporalio.client import Client

from resurrect.scheduler.base import Scheduler

# What each workflow-service RPC is, for the cost invariants (the rest count as "other").
RPC_KINDS: Mapping[str, str] = {
    "query_workflow": "query",
    "get_workflow_execution_history": "history",
    "get_workflow_execution_history_reverse": "history",
    "list_workflow_executions": "visibility",
    "list_closed_workflow_executions": "visibility",
    "list_open_workflow_executions": "visibility",
    "scan_workflow_executions": "visibility",
    "count_workflow_executions": "visibility",
    "signal_workflow_execution": "signal",
    "signal_with_start_workflow_execution": "signal",
    "start_workflow_execution": "start",
    "execute_multi_operation": "update",
    "update_workflow_execution": "update",
    "poll_workflow_execution_update": "update",
    "describe_workflow_execution": "describe",
}

# The scheduler methods counted (the Scheduler protocol's reads and mutations).
SCHEDULER_METHODS = (
    "list_jobs",
    "get_job",
    "list_nodes",
    "get_node",
    "list_active_jobs",
    "list_unhealthy_nodes",
    "list_nodes_named",
    "drain_census",
    "drain_node",
    "resume_node",
    "requeue_excluding",
    "cancel_job",
    "release_stale_hold",
    "read_admin_comment",
)


@dataclass
class CallCounts:
    """Calls by name, rows returned by name (list reads only), request bytes by name (RPCs
    only)."""

    calls: Counter[str] = field(default_factory=Counter)
    rows: Counter[str] = field(default_factory=Counter)
    sent: Counter[str] = field(default_factory=Counter)

    def by_kind(self, kinds: Mapping[str, str]) -> Counter[str]:
        """The calls summed by kind (a name without a kind counts as ``other``)."""
        return _summed(self.calls, kinds)

    def per(self, recoveries: int, kinds: Mapping[str, str] | None = None) -> dict[str, float]:
        """The calls and request bytes (by kind when ``kinds`` is given), and rows, per
        recovery."""
        counted, sent = self._calls_and_sent(kinds)
        each = {name: count / recoveries for name, count in counted.items()}
        each.update({f"{name} rows": count / recoveries for name, count in self.rows.items()})
        each.update({f"{name} bytes": count / recoveries for name, count in sent.items()})
        return each

    def bytes_per_call(self, kinds: Mapping[str, str] | None = None) -> dict[str, float]:
        """The request bytes of one call, on average, by name (by kind when ``kinds`` is
        given): what a call carries, whatever the number of calls (a poll more adds calls,
        not bytes to each; a request that carries the fleet grows here)."""
        counted, sent = self._calls_and_sent(kinds)
        return {f"{name} bytes/call": size / counted[name] for name, size in sent.items()}

    def _calls_and_sent(self, kinds: Mapping[str, str] | None) -> tuple[Counter[str], Counter[str]]:
        """Calls and request bytes by name, or summed by kind when ``kinds`` is given."""
        if kinds is None:
            return self.calls, self.sent
        return _summed(self.calls, kinds), _summed(self.sent, kinds)

    def clear(self) -> None:
        self.calls.clear()
        self.rows.clear()
        self.sent.clear()


def _summed(counts: Counter[str], kinds: Mapping[str, str]) -> Counter[str]:
    summed: Counter[str] = Counter()
    for name, count in counts.items():
        summed[kinds.get(name, "other")] += count
    return summed


def count_temporal_calls(client: Client) -> CallCounts:
    """Count every RPC ``client`` sends from now on (by RPC name)."""
    service = client.service_client
    original = service._rpc_call
    counts = CallCounts()

    async def counting(rpc: str, *args: Any, **kwargs: Any) -> Any:
        counts.calls[rpc] += 1
        request = kwargs.get("req", args[0] if args else None)
        if isinstance(request, Message):
            counts.sent[rpc] += request.ByteSize()
        return await original(rpc, *args, **kwargs)

    service._rpc_call = counting  # type: ignore[method-assign]
    return counts


def count_scheduler_calls(scheduler: Scheduler) -> CallCounts:
    """Count ``scheduler``'s calls (by method) and the rows its reads return, from now on.
    Calls the scheduler makes of itself (a verified mutation's reads) count too: they reach
    the controller the same way."""
    counts = CallCounts()
    for name in SCHEDULER_METHODS:
        method = getattr(scheduler, name, None)
        if method is not None:
            setattr(scheduler, name, _counted(name, method, counts))
    return counts


P = ParamSpec("P")
R = TypeVar("R")


def counted(name: str, function: Callable[P, R], counts: CallCounts) -> Callable[P, R]:
    """``function``, each call counted in ``counts`` under ``name``."""

    @functools.wraps(function)
    def counting(*args: P.args, **kwargs: P.kwargs) -> R:
        counts.calls[name] += 1
        return function(*args, **kwargs)

    return counting


def _counted(
    name: str, method: Callable[..., Awaitable[Any]], counts: CallCounts
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def counting(*args: Any, **kwargs: Any) -> Any:
        counts.calls[name] += 1
        result = await method(*args, **kwargs)
        if isinstance(result, list):
            counts.rows[name] += len(result)
        elif isinstance(result, tuple) and result and isinstance(result[-1], list):
            counts.rows[name] += len(result[-1])  # drain_census: (count, drained nodes)
        return result

    return counting
