"""An in-memory scheduler implementing :class:`resurrect.scheduler.Scheduler`.

For unit tests of activities, plugins and sensors without a cluster. It is the real
check -> act -> verify code of the Slurm backends (:class:`VerifiedScheduler`) over
primitives that change plain dicts instead of calling Slurm, so what a test sees is what
the Slurm backends do: a drained node is not drained again, an operator's drain is never
resumed, a requeue keeps the job id and owner (requeue-hold -> set the exclusion ->
release, or hold -> exclusion -> release for a pending job), a ``--no-requeue`` job is
refused.

Every primitive action is recorded in ``calls`` as Slurm would see it: ``("drain", node)``,
``("resume", node)``, ``("hold", job)``, ``("requeuehold", job)``, ``("exclude", job)``,
``("release", job)``, ``("cancel", job)``. ``fail_next`` makes the next N reads raise
:class:`SchedulerUnavailable` (a controller that is down), to test retries. A released job
starts on healthy nodes at once unless ``start_requeued_jobs`` is False.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from resurrect.contracts import FINISHED_JOB_STATES, JobInfo, JobState, NodeInfo
from resurrect.errors import (
    JobAlreadyPending,
    JobNotFound,
    NodeNotFound,
    SchedulerRefused,
    SchedulerUnavailable,
)
from resurrect.scheduler.verified import VerifiedScheduler


class FakeScheduler(VerifiedScheduler):
    """A scheduler in memory; state is plain dicts a test can read and change."""

    def __init__(
        self,
        nodes: Iterable[NodeInfo] = (),
        jobs: Iterable[JobInfo] = (),
        *,
        cluster_name: str = "fake",
        start_requeued_jobs: bool = True,
    ) -> None:
        # state changes at once, so each verification succeeds on its first read
        super().__init__(cluster_name, verify_timeout=1.0, poll_interval=0.01)
        self.nodes: dict[str, NodeInfo] = {n.name: n for n in nodes}
        self.jobs: dict[str, JobInfo] = {j.job_id: j for j in jobs}
        self.calls: list[tuple[str, str]] = []
        self.fail_next = 0
        self.start_requeued_jobs = start_requeued_jobs

    @classmethod
    def with_nodes(cls, count: int, *, prefix: str = "node", **kwargs: object) -> FakeScheduler:
        nodes = [NodeInfo(name=f"{prefix}{i}", state="IDLE") for i in range(1, count + 1)]
        return cls(nodes, **kwargs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ reads
    def _maybe_fail(self) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise SchedulerUnavailable("fake: slurm controller unreachable")

    async def list_jobs(self) -> list[JobInfo]:
        self._maybe_fail()
        return list(self.jobs.values())

    async def list_nodes(self) -> list[NodeInfo]:
        self._maybe_fail()
        return list(self.nodes.values())

    # ------------------------------------------------------------------ primitives
    def _node(self, name: str) -> NodeInfo:
        try:
            return self.nodes[name]
        except KeyError:
            raise NodeNotFound(f"fake: Node {name} not found") from None

    def _job(self, job_id: str) -> JobInfo:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise JobNotFound(f"fake: Invalid job id specified: {job_id}") from None

    def _set_job(self, job: JobInfo, **update: object) -> None:
        self.jobs[job.job_id] = job.model_copy(update=update)

    async def _act_drain(self, node: str, reason: str) -> None:
        info = self._node(node)
        self.calls.append(("drain", node))
        flags = info.flags if "DRAIN" in info.flags else [*info.flags, "DRAIN"]
        self.nodes[node] = info.model_copy(update={"flags": flags, "reason": reason})

    async def _act_resume(self, node: str) -> None:
        info = self._node(node)
        self.calls.append(("resume", node))
        flags = [f for f in info.flags if f != "DRAIN"]
        self.nodes[node] = info.model_copy(update={"flags": flags, "reason": ""})

    async def _act_hold(self, job_id: str) -> None:
        job = self._job(job_id)
        if job.state is not JobState.PENDING:
            raise SchedulerRefused(f"fake: job {job_id}: Job is no longer pending execution")
        self.calls.append(("hold", job_id))
        self._set_job(job, held=True)

    async def _act_requeuehold(self, job_id: str) -> None:
        job = self._job(job_id)
        if job.state is JobState.PENDING:
            raise JobAlreadyPending(f"fake: job {job_id}: Job is pending execution")
        if not job.requeue_allowed:
            raise SchedulerRefused(f"fake: job {job_id}: Requested operation is presently disabled")
        self.calls.append(("requeuehold", job_id))
        # like Slurm: the running attempt (if any) is ended and the job waits, held
        self._set_job(job, state=JobState.PENDING, held=True, restart_count=job.restart_count + 1)

    async def _act_admin_comment(self, job_id: str, text: str) -> None:
        # the hold mark: kept on the job like Slurm's AdminComment, not a recorded call
        self._set_job(self._job(job_id), admin_comment=text)

    async def read_admin_comment(self, job_id: str) -> str:
        # a job built without one has none, like a Slurm job nobody commented
        return self._job(job_id).admin_comment or ""

    async def _act_exclude(self, job_id: str, nodes: list[str]) -> None:
        job = self._job(job_id)
        self.calls.append(("exclude", job_id))
        self._set_job(job, excluded_nodes=list(nodes))

    async def _act_release(self, job_id: str) -> None:
        job = self._job(job_id)
        self.calls.append(("release", job_id))
        update: dict[str, object] = {"held": False}
        if self.start_requeued_jobs and job.state is JobState.PENDING:
            count = job.num_nodes or len(job.nodes) or 1
            healthy = list(
                itertools.islice(
                    (
                        n.name
                        for n in self.nodes.values()
                        if n.name not in job.excluded_nodes and not n.drained and not n.unavailable
                    ),
                    count,
                )
            )
            if len(healthy) == count:
                update |= {"state": JobState.RUNNING, "nodes": healthy}
        self._set_job(job, **update)

    async def _act_cancel(self, job_id: str) -> None:
        job = self._job(job_id)
        if job.state in FINISHED_JOB_STATES:
            raise SchedulerRefused(f"fake: job {job_id}: Job has already finished")
        self.calls.append(("cancel", job_id))
        self._set_job(job, state=JobState.CANCELLED)
