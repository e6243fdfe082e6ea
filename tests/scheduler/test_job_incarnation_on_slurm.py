"""What names a job incarnation (resurrect/job_incarnation.py) on a real Slurm cluster, read
with the Slurm backend: a requeue (an administrator's, as resurrect's, and the job owner's own)
sets the job's SubmitTime to its moment and counts Restarts up; the owner moving the job's
start time changes neither; the incarnation named before the requeues is the one after."""

from __future__ import annotations

import asyncio
import pwd

import pytest
from support.slurm import LocalSlurm

from resurrect.contracts import JobInfo
from resurrect.job_incarnation import Incarnation, incarnation_of
from resurrect.scheduler.slurm_cli import SlurmCli

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions]


def as_owner(slurm: LocalSlurm, *scontrol: str) -> str:
    """``scontrol`` run by the job's owner (the demo user), not root."""
    return slurm.run(
        [
            "runuser", "-u", slurm.demo_user, "--", "env", f"SLURM_CONF={slurm.slurm_conf}",
            str(slurm.bin_dir / "scontrol"), *scontrol,
        ]
    )  # fmt: skip


async def running(slurm: LocalSlurm, sched: SlurmCli, job_id: str, restarts: int) -> JobInfo:
    """The job once it runs again, read by the backend; it must be attempt ``restarts``."""
    record = await asyncio.to_thread(slurm.wait_job_state, job_id, ["RUNNING"], 120)
    assert record["Restarts"] == str(restarts)
    return await sched.get_job(job_id)


async def test_the_incarnation_outlives_requeues_that_reset_the_submit_time(
    slurm: LocalSlurm,
) -> None:
    sched = slurm.scheduler()
    job_id = slurm.submit(["sleep", "600"], nodes=1)
    first = await running(slurm, sched, job_id, 0)
    assert first.user_id == pwd.getpwnam(slurm.demo_user).pw_uid
    assert first.submit_time is not None
    incarnation = incarnation_of(first, ())
    assert incarnation == Incarnation(first.user_id, int(first.submit_time.timestamp()))

    slurm.run(["scontrol", "requeue", job_id])  # as resurrect requeues a job (root)
    second = await running(slurm, sched, job_id, 1)
    assert second.submit_time is not None and second.submit_time > first.submit_time
    assert second.user_id == first.user_id
    assert incarnation_of(second, [incarnation]) == incarnation

    as_owner(slurm, "requeuehold", job_id)  # the owner's own requeue ...
    await asyncio.to_thread(slurm.wait_job_state, job_id, ["PENDING"], 60)
    as_owner(slurm, "update", f"JobId={job_id}", "StartTime=now+2")  # ... and start time
    as_owner(slurm, "release", job_id)
    third = await running(slurm, sched, job_id, 2)
    assert third.submit_time is not None and third.submit_time > second.submit_time
    assert incarnation_of(third, [incarnation]) == incarnation
    # an incarnation no recovery recorded would be named from the submit time now: later
    assert incarnation_of(third, []) != incarnation
    await sched.cancel_job(job_id)
