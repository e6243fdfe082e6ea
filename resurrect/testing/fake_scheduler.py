"""An in-memory scheduler implementing :class:`resurrect.scheduler.Scheduler`.

For unit tests of activities, plugins and sensors without a cluster. It behaves like Slurm
where resurrect relies on it: drains carry a reason, resume refuses drains that resurrect
did not make, requeue keeps the job id and owner, bumps the restart count and records the
exclusion, a ``--no-requeue`` job is refused. Every mutation is recorded in ``calls``;
``fail_next`` makes the next N calls raise :class:`SchedulerUnavailable` (a controller that
is down), to test retries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from resurrect.contracts import FINISHED_JOB_STATES, JobInfo, JobState, MutationResult, NodeInfo
from resurrect.errors import JobNotFound, NodeNotFound, SchedulerRefused, SchedulerUnavailable
from resurrect.scheduler.base import DRAIN_REASON_PREFIX

FINISHED = FINISHED_JOB_STATES


class FakeScheduler:
    """A scheduler in memory; state is plain dicts a test can read and change."""

    def __init__(
        self,
        nodes: Iterable[NodeInfo] = (),
        jobs: Iterable[JobInfo] = (),
        *,
        cluster_name: str = "fake",
        start_requeued_jobs: bool = True,
    ) -> None:
        self._cluster_name = cluster_name
        self.nodes: dict[str, NodeInfo] = {n.name: n for n in nodes}
        self.jobs: dict[str, JobInfo] = {j.job_id: j for j in jobs}
        self.calls: list[tuple[str, str]] = []
        self.fail_next = 0
        self.start_requeued_jobs = start_requeued_jobs

    @classmethod
    def with_nodes(cls, count: int, *, prefix: str = "node", **kwargs: object) -> FakeScheduler:
        nodes = [NodeInfo(name=f"{prefix}{i}", state="IDLE") for i in range(1, count + 1)]
        return cls(nodes, **kwargs)  # type: ignore[arg-type]

    @property
    def cluster_name(self) -> str:
        return self._cluster_name

    def _maybe_fail(self) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise SchedulerUnavailable("fake: slurm controller unreachable")

    # ------------------------------------------------------------------ reads
    async def list_jobs(self) -> list[JobInfo]:
        self._maybe_fail()
        return list(self.jobs.values())

    async def get_job(self, job_id: str) -> JobInfo:
        self._maybe_fail()
        try:
            return self.jobs[job_id]
        except KeyError:
            raise JobNotFound(f"fake: no job {job_id}") from None

    async def list_nodes(self) -> list[NodeInfo]:
        self._maybe_fail()
        return list(self.nodes.values())

    async def get_node(self, name: str) -> NodeInfo:
        self._maybe_fail()
        try:
            return self.nodes[name]
        except KeyError:
            raise NodeNotFound(f"fake: no node {name}") from None

    # ------------------------------------------------------------------ mutations
    async def drain_node(self, name: str, reason: str) -> MutationResult:
        node = await self.get_node(name)
        if not reason.startswith(DRAIN_REASON_PREFIX):
            reason = f"{DRAIN_REASON_PREFIX} {reason}"
        if node.drained:
            return MutationResult(
                target=name, operation="drain", changed=False, detail=f"{name} already drained"
            )
        self.calls.append(("drain", name))
        self.nodes[name] = node.model_copy(
            update={"flags": [*node.flags, "DRAIN"], "reason": reason}
        )
        return MutationResult(
            target=name, operation="drain", changed=True, detail=f"drained {name}"
        )

    async def resume_node(self, name: str) -> MutationResult:
        node = await self.get_node(name)
        if not node.drained:
            return MutationResult(
                target=name, operation="resume", changed=False, detail=f"{name} not drained"
            )
        if not node.reason.startswith(DRAIN_REASON_PREFIX):
            raise SchedulerRefused(f"fake: {name} was drained by someone else ({node.reason})")
        self.calls.append(("resume", name))
        self.nodes[name] = node.model_copy(
            update={"flags": [f for f in node.flags if f != "DRAIN"], "reason": ""}
        )
        return MutationResult(
            target=name, operation="resume", changed=True, detail=f"resumed {name}"
        )

    async def requeue_excluding(
        self, job_id: str, exclude_nodes: list[str], *, drop: Sequence[str] = ()
    ) -> MutationResult:
        job = await self.get_job(job_id)
        if not job.requeue_allowed:
            raise SchedulerRefused(f"fake: job {job_id} is not requeueable")
        self.calls.append(("requeue", job_id))
        gone = set(drop) - set(exclude_nodes)
        excluded = [
            n for n in dict.fromkeys([*job.excluded_nodes, *exclude_nodes]) if n not in gone
        ]
        update: dict[str, object] = {
            "excluded_nodes": excluded,
            "restart_count": job.restart_count + 1,
            "state": JobState.PENDING,
            "held": False,
        }
        if self.start_requeued_jobs:
            healthy = [
                n.name
                for n in self.nodes.values()
                if n.name not in excluded and not n.drained and not n.unavailable
            ]
            count = job.num_nodes or len(job.nodes) or 1
            if len(healthy) >= count:
                update |= {"state": JobState.RUNNING, "nodes": healthy[:count]}
        self.jobs[job_id] = job.model_copy(update=update)
        return MutationResult(
            target=job_id,
            operation="requeue",
            changed=True,
            detail=f"requeued {job_id} excluding {excluded}",
        )

    async def cancel_job(self, job_id: str) -> MutationResult:
        job = await self.get_job(job_id)
        if job.state in FINISHED:
            return MutationResult(
                target=job_id, operation="cancel", changed=False, detail="already finished"
            )
        self.calls.append(("cancel", job_id))
        self.jobs[job_id] = job.model_copy(update={"state": JobState.CANCELLED})
        return MutationResult(
            target=job_id, operation="cancel", changed=True, detail=f"cancelled {job_id}"
        )
