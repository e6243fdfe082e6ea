"""The watcher's compact, filtered view against a real local Slurm cluster (22.05 here):
a queue of held jobs is never read, a lost node of a running opted-in job is reported, and
a job slurmctld requeued (pending again, so out of the filtered view) is still caught."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence

import pytest
from support.reports import Reports
from support.slurm import LocalSlurm, local_slurm_fixture

from resurrect.config import ResurrectConfig
from resurrect.contracts import FaultClass, Interruption, JobState
from resurrect.scheduler.slurm_exec import CommandResult, CommandRunner
from resurrect.sensors.slurm_watcher import SlurmWatcher

pytestmark = pytest.mark.slurm

OPT_IN = json.dumps({"resurrect": {}})
SLEEP_JOB = ["bash", "-c", "srun sleep 600 & sleep 600; wait"]


class RecordingRunner(CommandRunner):
    def __init__(self, slurm_conf: str) -> None:
        super().__init__(slurm_conf=slurm_conf)
        self.calls: list[tuple[str, ...]] = []
        self.bytes = 0

    async def run(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        self.calls.append(tuple(argv))
        result = await super().run(argv, timeout=timeout)
        self.bytes += len(result.stdout)
        return result


# A cluster of its own: the watcher also reads jobs that ended moments ago, and on the shared
# session cluster earlier tests' cancelled jobs (kept by slurmctld for MinJobAge) would be
# read with this test's job and blur the byte count the test pins.
own_slurm = local_slurm_fixture(nodes=3, scope="module", name="own_slurm")


async def test_the_watcher_reads_only_what_runs_and_catches_a_lost_node(
    own_slurm: LocalSlurm,
) -> None:
    slurm = own_slurm
    held = [
        slurm.submit(["true"], nodes=1, name=f"held{i}", extra_args=["--hold"]) for i in range(40)
    ]
    job_id = slurm.submit(SLEEP_JOB, nodes=2, name="watched", comment=OPT_IN)
    await asyncio.to_thread(slurm.wait_job_state, job_id, ["RUNNING"], 60)
    sched = slurm.scheduler()
    runner = RecordingRunner(slurm.slurm_conf)
    sched.runner = runner
    reports = Reports()

    config = ResurrectConfig.model_validate(
        {"cluster": {"name": slurm.cluster_name}, "watcher": {"not_responding_grace_s": 0}}
    )
    watcher = SlurmWatcher(sched, config, reports)
    await watcher.poll_once()
    seen = [j.job_id for j in watcher._last_jobs.values()]
    # the running job is read, none of the 40 held ones is
    assert seen == [job_id], seen
    runner.calls.clear()
    runner.bytes = 0
    await watcher.poll_once()
    await watcher.poll_once()
    # steady state: one filtered job query and one filtered node query per poll
    assert len(runner.calls) == 4, runner.calls
    assert not [c for c in runner.calls if "--json" in c]
    assert runner.bytes < 1000
    assert not any(h in " ".join(" ".join(c) for c in runner.calls) for h in held)

    victim = (await sched.get_job(job_id)).nodes[1]
    started = time.monotonic()
    slurm.kill_node(victim)

    def mine() -> list[Interruption]:
        return [r for r in reports if r.job_id == job_id]

    while not mine() and time.monotonic() - started < 60:
        await watcher.poll_once()
        await asyncio.sleep(0.5)
    assert mine(), "the lost node was not reported"
    first = mine()[0]
    assert first.job_id == job_id and first.restart_count == 0
    assert first.fault_hint is FaultClass.NODE_LOST and victim in first.suspect_nodes
    print(f"kill-node -> reported in {time.monotonic() - started:.1f} s: {first.reason}")

    # slurmctld requeues the job (PENDING again, out of the filtered view): the watcher
    # still follows it by id and sees the restart count go up
    async def requeued() -> bool:
        await watcher.poll_once()
        job = watcher._last_jobs.get(job_id)
        return job is not None and job.restart_count == 1

    while not await requeued() and time.monotonic() - started < 90:
        await asyncio.sleep(0.5)
    job = watcher._last_jobs[job_id]
    # the restart is counted at the requeue: the old attempt may still be completing then
    # (seen on 26.05), before the job reads PENDING
    requeued_states = {JobState.PENDING, JobState.RUNNING, JobState.COMPLETING}
    assert job.restart_count == 1 and job.state in requeued_states
    assert job.comment == OPT_IN
