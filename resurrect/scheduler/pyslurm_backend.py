"""The Slurm backend over pyslurm (>= 23.x API), for clusters whose Slurm matches pyslurm.

pyslurm links against libslurm and must match the cluster's Slurm major release (pyslurm
``25.11.x`` <-> Slurm 25.11), so :func:`resurrect.scheduler.factory.make_scheduler` only picks
it when it imports and its version matches. pyslurm is synchronous: calls run in a thread.
Objects are duck-typed (``getattr`` with fallbacks) so the module type-checks and can be
tested without pyslurm installed; the check-act-verify logic is shared with SlurmCli.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from types import ModuleType
from typing import Any, TypeVar

from resurrect.contracts import JobInfo, NodeInfo
from resurrect.errors import SchedulerError
from resurrect.job_notes import JobNotes
from resurrect.scheduler.hostlist import expand_hostlist
from resurrect.scheduler.slurm_exec import classify_text
from resurrect.scheduler.slurm_json import (
    HELD_REASONS,
    parse_job_state,
    parse_node_state,
    why_unreadable,
)
from resurrect.scheduler.verified import VerifiedScheduler

_UNREADABLE = JobNotes(logging.getLogger(__name__))

T = TypeVar("T")


def import_pyslurm() -> ModuleType | None:
    """pyslurm if it imports (it fails to load against a mismatched libslurm), else None."""
    try:
        return importlib.import_module("pyslurm")
    except Exception:  # ImportError, or OSError from a missing/mismatched libslurm
        return None


def pyslurm_version(mod: ModuleType) -> tuple[int, int] | None:
    """(major, minor) of pyslurm, which equals the Slurm release it was built for."""
    raw = getattr(mod, "__version__", None)
    if raw is None and callable(getattr(mod, "version", None)):
        raw = mod.version()
    parts = str(raw or "").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _attr(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return default


def _names(value: Any) -> list[str]:
    """Node names from a hostlist string, a list, or a dict keyed by name."""
    if value is None:
        return []
    if isinstance(value, str):
        return expand_hostlist(value)
    if isinstance(value, dict):
        return [str(k) for k in value]
    if isinstance(value, Iterable):
        return [str(v) for v in value]
    return []


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and value > 0:
        return datetime.fromtimestamp(value, tz=UTC)
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def job_from_pyslurm(job: Any) -> JobInfo:
    """A pyslurm ``Job`` as a JobInfo."""
    state, _flags = parse_job_state(str(_attr(job, "state", default="")))
    reason = str(_attr(job, "state_reason", default="") or "")
    reason = "" if reason == "None" else reason
    priority = _attr(job, "priority")
    held = state.value in ("PENDING", "COMPLETING") and (priority == 0 or reason in HELD_REASONS)
    return JobInfo(
        job_id=str(_attr(job, "id", "job_id")),
        name=str(_attr(job, "name", default="") or ""),
        state=state,
        state_reason=reason,
        user=str(_attr(job, "user_name", default="") or ""),
        user_id=_int(_attr(job, "user_id")),
        group_id=_int(_attr(job, "group_id")),
        partition=str(_attr(job, "partition", default="") or ""),
        nodes=_names(_attr(job, "allocated_nodes", "nodes")),
        excluded_nodes=_names(_attr(job, "excluded_nodes")),
        num_nodes=_int(_attr(job, "num_nodes")) or 0,
        restart_count=_int(_attr(job, "requeue_count", "restart_count", "restart_cnt")) or 0,
        requeue_allowed=bool(_attr(job, "is_requeueable", "requeue", default=True)),
        held=held,
        comment=str(_attr(job, "comment", default="") or ""),
        admin_comment=str(_attr(job, "admin_comment", default="") or ""),
        stdout_path=_attr(job, "standard_output"),
        stderr_path=_attr(job, "standard_error"),
        work_dir=_attr(job, "working_directory", "cwd"),
        exit_code=_int(_attr(job, "exit_code")),
        exit_signal=_int(_attr(job, "exit_code_signal", "signal")) or None,
        start_time=_time(_attr(job, "start_time")),
        end_time=_time(_attr(job, "end_time")),
    )


def _readable_job(job: Any) -> JobInfo | None:
    """``job`` as a JobInfo, or None (noted) when its record cannot be read: one job's
    data costs that job alone."""
    try:
        return job_from_pyslurm(job)
    except Exception as exc:
        job_id = str(_attr(job, "id", "job_id", default="?"))[:20]
        _UNREADABLE.note(job_id, f"job record left out: {why_unreadable(exc)}")
        return None


def node_from_pyslurm(node: Any) -> NodeInfo:
    """A pyslurm ``Node`` as a NodeInfo (state like ``"IDLE+DRAIN"`` or a list)."""
    raw_state = _attr(node, "state", default="UNKNOWN")
    if isinstance(raw_state, str):
        base, flags = parse_node_state(raw_state)
    else:
        base, flags = parse_node_state(list(raw_state))
    extra = _attr(node, "state_flags", "next_state")
    if isinstance(extra, list | tuple):
        flags += [str(f).upper() for f in extra if str(f).upper() not in flags]
    return NodeInfo(
        name=str(_attr(node, "name")),
        state=base,
        flags=flags,
        reason=str(_attr(node, "reason", default="") or ""),
        partitions=[str(p) for p in (_attr(node, "partitions", default=[]) or [])],
    )


class PyslurmScheduler(VerifiedScheduler):
    """Scheduler over the pyslurm API (same semantics as SlurmCli)."""

    def __init__(
        self,
        cluster_name: str,
        pyslurm: ModuleType | None = None,
        *,
        verify_timeout: float = 20.0,
        poll_interval: float = 0.25,
    ) -> None:
        super().__init__(cluster_name, verify_timeout=verify_timeout, poll_interval=poll_interval)
        mod = pyslurm or import_pyslurm()
        if mod is None:
            raise SchedulerError("pyslurm is not importable")
        self.pyslurm: Any = mod

    async def _call(self, fn: Callable[[], T]) -> T:
        """Run a blocking pyslurm call in a thread; map its errors by message."""
        try:
            return await asyncio.to_thread(fn)
        except SchedulerError:
            raise
        except Exception as exc:
            raise classify_text(str(exc), "pyslurm: ") from exc

    async def list_jobs(self) -> list[JobInfo]:
        jobs = await self._call(lambda: self.pyslurm.Jobs.load())
        values = jobs.values() if isinstance(jobs, dict) or hasattr(jobs, "values") else jobs
        return [info for info in map(_readable_job, values) if info is not None]

    async def list_nodes(self) -> list[NodeInfo]:
        nodes = await self._call(lambda: self.pyslurm.Nodes.load())
        values = nodes.values() if isinstance(nodes, dict) or hasattr(nodes, "values") else nodes
        return [node_from_pyslurm(n) for n in values]

    def _job(self, job_id: str) -> Any:
        return self.pyslurm.Job(int(job_id))

    async def _act_drain(self, node: str, reason: str) -> None:
        changes = self.pyslurm.Node(state="DRAIN", reason=reason)
        await self._call(lambda: self.pyslurm.Node(node).modify(changes))

    async def _act_resume(self, node: str) -> None:
        changes = self.pyslurm.Node(state="RESUME")
        await self._call(lambda: self.pyslurm.Node(node).modify(changes))

    async def _act_hold(self, job_id: str) -> None:
        await self._call(lambda: self._job(job_id).hold())

    async def _act_requeuehold(self, job_id: str) -> None:
        await self._call(lambda: self._job(job_id).requeue(hold=True))

    async def _act_exclude(self, job_id: str, nodes: list[str]) -> None:
        desc = self.pyslurm.JobSubmitDescription(excluded_nodes=list(nodes))
        await self._call(lambda: self._job(job_id).modify(desc))

    async def _act_release(self, job_id: str) -> None:
        await self._call(lambda: self._job(job_id).release())

    async def _act_admin_comment(self, job_id: str, text: str) -> None:
        desc = self.pyslurm.JobSubmitDescription(admin_comment=text)
        await self._call(lambda: self._job(job_id).modify(desc))

    async def _act_cancel(self, job_id: str) -> None:
        await self._call(lambda: self._job(job_id).cancel())
