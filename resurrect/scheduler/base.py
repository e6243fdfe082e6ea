"""The small, typed interface every scheduler backend implements, and its defaults.

All methods are coroutines. Mutations are idempotent: they check the current state before
acting (draining a drained node returns ``changed=False``) and verify the scheduler reached
the requested state afterwards, raising :class:`~resurrect.errors.SchedulerError` if not.

What workflows, plans, rules and sensors need of a scheduler is all here, so a backend for
another scheduler (e.g. Kubernetes JobSets, docs/architecture.md) plugs in through
:func:`resurrect.scheduler.factory.register_scheduler` without touching them:

* reads and verified mutations (jobs, nodes, drain, resume, requeue excluding nodes, cancel);
* the watcher's cheap view (:meth:`Scheduler.list_active_jobs` and the three node reads):
  :class:`SchedulerBase` implements it from the full reads; a backend with cheaper filtered
  queries overrides it (the Slurm CLI backend does);
* hold marks: the key that tags them and :meth:`Scheduler.release_stale_hold`, what the
  fail-open watchdog calls;
* the job owner's opt-in text: :attr:`JobInfo.comment <resurrect.contracts.JobInfo>`, filled
  by each backend from where its scheduler keeps it (Slurm: the job comment);
* job states: :class:`~resurrect.contracts.JobState`, to which a backend maps its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from typing import Protocol, runtime_checkable

from resurrect.contracts import JobInfo, JobState, MutationResult, NodeInfo
from resurrect.scheduler.hold_marker import HoldMarkKey

# Every drain resurrect makes carries this reason prefix; resurrect only ever resumes nodes
# whose reason starts with it, so drains made by operators or other tools are never undone.
DRAIN_REASON_PREFIX = "resurrect:"


@runtime_checkable
class Scheduler(Protocol):
    """What resurrect needs from a batch scheduler."""

    # tags resurrect's hold marks (the worker and the watchdog use the same key file)
    hold_mark_key: HoldMarkKey

    @property
    def cluster_name(self) -> str: ...

    async def list_jobs(self) -> list[JobInfo]:
        """All jobs the controller currently knows (pending, running, recently finished)."""
        ...

    async def get_job(self, job_id: str) -> JobInfo:
        """One job; raises JobNotFound."""
        ...

    async def list_nodes(self) -> list[NodeInfo]: ...

    async def get_node(self, name: str) -> NodeInfo:
        """One node; raises NodeNotFound."""
        ...

    async def drain_node(self, name: str, reason: str) -> MutationResult:
        """Drain ``name``; ``reason`` gets DRAIN_REASON_PREFIX if it lacks it."""
        ...

    async def resume_node(self, name: str) -> MutationResult:
        """Return a node to service, only if resurrect drained it (reason prefix)."""
        ...

    async def requeue_excluding(
        self,
        job_id: str,
        exclude_nodes: list[str],
        *,
        drop: Sequence[str] = (),
        before_release: Callable[[], Awaitable[object]] | None = None,
        release_not_before: float = 0.0,
    ) -> MutationResult:
        """Requeue the job keeping its id and owner, never on ``exclude_nodes``.

        Holds the job first (so slurmctld's own requeue cannot place it on a bad node),
        sets the exclusion (its existing one plus ``exclude_nodes``, less ``drop``: nodes
        resurrect excluded earlier and gives back), awaits ``before_release`` (the fencing
        wait: no new attempt may start before it ends), then releases it. A job already
        pending with that exclusion is left as it is, unless there is a wait to await.
        If anything fails before the release, the job is released all the same (fail
        open) once the epoch second ``release_not_before`` (the fencing deadline) has
        passed; before it, the job stays held, with resurrect's hold mark, for a retry or
        the watchdog to release.
        """
        ...

    async def cancel_job(self, job_id: str) -> MutationResult: ...

    async def give_back_nodes(self, job_id: str, nodes: Sequence[str]) -> MutationResult:
        """Take ``nodes`` off a pending job's exclusion list without holding or requeueing
        it; a job no longer pending is left as it is."""
        ...

    async def release_stale_hold(self, job_id: str, bound_s: float) -> MutationResult:
        """Release ``job_id`` if resurrect has held it (its valid hold mark) for longer than
        ``bound_s``; any other hold is left alone."""
        ...

    # ------------------------------------------------------------------ the watcher's view
    async def list_active_jobs(self, also: Collection[str] = ()) -> list[JobInfo]:
        """Running, suspended and recently failed jobs, and the jobs ``also`` names."""
        ...

    async def list_unhealthy_nodes(self) -> list[NodeInfo]:
        """Nodes that are down, failed, not responding, unknown or future."""
        ...

    async def list_nodes_named(self, names: Collection[str]) -> list[NodeInfo]:
        """The nodes of ``names`` that exist."""
        ...

    async def drain_census(self) -> tuple[int, list[NodeInfo]]:
        """How many nodes the cluster has, and the drained (or draining) ones."""
        ...

    async def list_held_after_failed_launch(self) -> list[str]:
        """The ids of the pending jobs slurmctld requeued and held because their launch failed
        (:attr:`JobInfo.held_after_failed_launch`): a look at the whole pending queue, so
        the watcher makes it rarely (``watcher.held_scan_interval_s``)."""
        ...


# Pending and normally ended jobs never make an interruption by themselves.
_IDLE_STATES = frozenset({JobState.PENDING, JobState.COMPLETED, JobState.CANCELLED})


def watched_state(state: JobState) -> bool:
    """Whether a job in ``state`` is in the watcher's view (not pending, not normally ended)."""
    return state not in _IDLE_STATES


def active_only(jobs: Iterable[JobInfo], also: Collection[str] = ()) -> list[JobInfo]:
    """``jobs`` without pending and normally ended ones (except those ``also`` names)."""
    wanted = set(also)
    return [job for job in jobs if watched_state(job.state) or job.job_id in wanted]


def census_of(nodes: Collection[NodeInfo]) -> tuple[int, list[NodeInfo]]:
    """The node count of ``nodes`` and the drained (or draining) ones among them."""
    return len(nodes), [node for node in nodes if node.drained]


class SchedulerBase(ABC):
    """The watcher's view of :class:`Scheduler` from a backend's full reads: every job and
    node is read and filtered here. Backends with cheaper filtered queries override it."""

    @abstractmethod
    async def list_jobs(self) -> list[JobInfo]: ...

    @abstractmethod
    async def list_nodes(self) -> list[NodeInfo]: ...

    async def list_active_jobs(self, also: Collection[str] = ()) -> list[JobInfo]:
        """Running, suspended and recently failed jobs, and the jobs ``also`` names."""
        return active_only(await self.list_jobs(), also)

    async def list_unhealthy_nodes(self) -> list[NodeInfo]:
        """Nodes that are down, failed, not responding, unknown or future."""
        return [node for node in await self.list_nodes() if node.unavailable]

    async def list_held_after_failed_launch(self) -> list[str]:
        """The pending jobs slurmctld held after a failed launch."""
        return [job.job_id for job in await self.list_jobs() if job.held_after_failed_launch]

    async def list_nodes_named(self, names: Collection[str]) -> list[NodeInfo]:
        """The nodes of ``names`` that exist."""
        wanted = set(names)
        if not wanted:
            return []
        return [node for node in await self.list_nodes() if node.name in wanted]

    async def drain_census(self) -> tuple[int, list[NodeInfo]]:
        """How many nodes the cluster has, and the drained (or draining) ones."""
        return census_of(await self.list_nodes())
