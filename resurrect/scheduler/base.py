"""The small, typed interface every scheduler backend implements.

All methods are coroutines. Mutations are idempotent: they check the current state before
acting (draining a drained node returns ``changed=False``) and verify the scheduler reached
the requested state afterwards, raising :class:`~resurrect.errors.SchedulerError` if not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from resurrect.contracts import JobInfo, MutationResult, NodeInfo

# Every drain resurrect makes carries this reason prefix; resurrect only ever resumes nodes
# whose reason starts with it, so drains made by operators or other tools are never undone.
DRAIN_REASON_PREFIX = "resurrect:"


@runtime_checkable
class Scheduler(Protocol):
    """What resurrect needs from a batch scheduler."""

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
        self, job_id: str, exclude_nodes: list[str], *, drop: Sequence[str] = ()
    ) -> MutationResult:
        """Requeue the job keeping its id and owner, never on ``exclude_nodes``.

        Holds the job first (so slurmctld's own requeue cannot place it on a bad node),
        sets the exclusion (its existing one plus ``exclude_nodes``, less ``drop``: nodes
        resurrect excluded earlier and gives back), then releases it.
        """
        ...

    async def cancel_job(self, job_id: str) -> MutationResult: ...
