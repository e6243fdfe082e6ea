"""The fail-open watchdog's decisions (resurrect.operator.watchdog) over a scheduler kept in
memory; tests/e2e/test_operator_control_on_slurm.py runs it against real Slurm."""

from __future__ import annotations

import time

from resurrect.contracts import JobInfo, JobState, NodeInfo
from resurrect.errors import SchedulerUnavailable
from resurrect.operator.watchdog import release_stale_holds
from resurrect.scheduler.hold_marker import HoldMarkKey, has_marker, marked
from resurrect.scheduler.verified import VerifiedScheduler


class MemorySlurm(VerifiedScheduler):
    """Just enough of a Slurm backend: jobs in a dict, holds and AdminComments."""

    def __init__(self, jobs: list[JobInfo]) -> None:
        super().__init__("mem", verify_timeout=1, poll_interval=0.01)
        self.hold_mark_key = HoldMarkKey(key=KEY)
        self.jobs = {j.job_id: j for j in jobs}
        self.broken: set[str] = set()

    async def list_jobs(self) -> list[JobInfo]:
        return list(self.jobs.values())

    async def list_nodes(self) -> list[NodeInfo]:
        return []

    def _set(self, job_id: str, **update: object) -> None:
        self.jobs[job_id] = self.jobs[job_id].model_copy(update=update)

    async def _act_release(self, job_id: str) -> None:
        if job_id in self.broken:
            raise SchedulerUnavailable("slurmctld busy")
        self._set(job_id, held=False)

    async def _act_admin_comment(self, job_id: str, text: str) -> None:
        self._set(job_id, admin_comment=text)

    async def _act_drain(self, node: str, reason: str) -> None: ...
    async def _act_resume(self, node: str) -> None: ...
    async def _act_hold(self, job_id: str) -> None: ...
    async def _act_requeuehold(self, job_id: str) -> None: ...
    async def _act_exclude(self, job_id: str, nodes: list[str]) -> None: ...
    async def _act_cancel(self, job_id: str) -> None: ...


KEY = b"watchdog-test-key".ljust(32, b".")


def ours(job_id: str, comment: str, at: float) -> str:
    return marked(comment, at, key=KEY, job_id=job_id)


def held(job_id: str, comment: str) -> JobInfo:
    return JobInfo(job_id=job_id, state=JobState.PENDING, held=True, admin_comment=comment)


async def test_only_holds_resurrect_left_longer_than_the_bound_are_released() -> None:
    now = time.time()
    slurm = MemorySlurm(
        [
            held("1", ours("1", "ticket 7", now - 300)),  # ours, stale
            held("2", ours("2", "", now - 10)),  # ours, within the bound
            held("3", "ticket 9"),  # an administrator's hold
            held("4", ours("4", "", now - 300)),  # ours, stale, but release fails
            held("5", ours("5", "", now - 300)),  # ours, stale: released despite job 4
            held("6", ours("1", "", now - 300)),  # job 1's mark copied: not this job's
            held("7", "resurrect-hold:1"),  # no tag: resurrect did not write it
        ]
    )
    slurm.broken.add("4")
    released = await release_stale_holds(slurm, bound_s=120)
    assert [r.target for r in released] == ["1", "5"]
    assert not slurm.jobs["1"].held and slurm.jobs["1"].admin_comment == "ticket 7"
    assert slurm.jobs["2"].held and has_marker(slurm.jobs["2"].admin_comment)
    assert slurm.jobs["3"].held and slurm.jobs["3"].admin_comment == "ticket 9"
    assert slurm.jobs["4"].held
    assert not slurm.jobs["5"].held
    assert slurm.jobs["6"].held and slurm.jobs["7"].held
    assert slurm.jobs["7"].admin_comment == "resurrect-hold:1"  # kept as it was
