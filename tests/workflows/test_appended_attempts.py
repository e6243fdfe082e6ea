"""A job that appends every attempt to one output file: each recovery judges its own attempt.

Job 7 (``--open-mode=append``) died on its first attempt naming node2; resurrect requeued it
without node2, and its second attempt, on node3 and node4, died naming node4. The recovery of
the first attempt records where the second attempt's output begins (the file's size while
the requeued job was pending), and the recovery of the second reads the file from there: it
names node4, not node2 (before, it read the whole tail, named node2, a node the attempt
never ran on, and restarted without touching node4).

Real Temporal dev server, real activities, a fake scheduler; the output file is real.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from support.builders import make_config, opt_in
from support.recovery import recover
from support.workers import resurrect_workers
from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    OutputMark,
    RecoveryOutcome,
)
from resurrect.testing import FakeScheduler

pytestmark = pytest.mark.temporal

FATAL = "[rank1] RuntimeError: CUDA error: uncorrectable ECC error encountered"
PRINTS = {
    0: f"attempt 0 on node1,node2\nstep 45\nnode2: {FATAL}\n",
    1: f"attempt 1 on node3,node4\nstep 45\nnode4: {FATAL}\n",
}
# reads of the released job (the requeue verifies with two) before its next attempt starts
PENDING_READS = 6
NEXT_NODES = {1: ["node3", "node4"], 2: ["node1", "node3"]}


class AppendingCluster(FakeScheduler):
    """Like Slurm with ``JobFileAppend=1``: a requeued job stays pending for PENDING_READS reads
    after its release, then its next attempt starts and appends to the same file."""

    def __init__(self, out: Path) -> None:
        super().__init__(FakeScheduler.with_nodes(4).nodes.values(), start_requeued_jobs=False)
        self.out = out
        self.pending_reads = 0

    async def get_job(self, job_id: str) -> JobInfo:
        job = await super().get_job(job_id)
        if job.state is not JobState.PENDING or job.held:
            return job
        self.pending_reads += 1
        if self.pending_reads < PENDING_READS:
            return job
        self.pending_reads = 0
        with self.out.open("a") as file:
            file.write(PRINTS.get(job.restart_count, f"attempt {job.restart_count}\n"))
        job = job.model_copy(
            update={"state": JobState.RUNNING, "nodes": NEXT_NODES[job.restart_count]}
        )
        self.jobs[job_id] = job
        return job


@dataclass
class Job7:
    client: Client
    config: ResurrectConfig
    cluster: AppendingCluster

    async def fails(self) -> RecoveryOutcome:
        """The running attempt of job 7 fails; the Slurm watcher's report, recovered."""
        job = self.cluster.jobs["7"].model_copy(update={"state": JobState.FAILED})
        self.cluster.jobs["7"] = job
        report = Interruption(
            cluster=self.config.cluster.name,
            job_id="7",
            restart_count=job.restart_count,
            source="slurm_watcher",
            reason="job ended FAILED",
            observed_at=datetime.now(UTC),
            job_state=JobState.FAILED,
            nodes=job.nodes,
        )
        return await recover(self.client, self.config, report)


@pytest_asyncio.fixture
async def job7(temporal_client: Client, tmp_path: Path) -> AsyncIterator[Job7]:
    config = make_config(
        tmp_path, mode="act", recovery={"wait_running_timeout_s": 20, "activity_timeout_s": 20}
    )
    out = tmp_path / "slurm-7.out"
    out.write_text(PRINTS[0])
    cluster = AppendingCluster(out)
    cluster.jobs["7"] = JobInfo(
        job_id="7",
        state=JobState.RUNNING,
        user="alice",
        user_id=os.getuid(),
        nodes=["node1", "node2"],
        num_nodes=2,
        comment=opt_in(max_restarts=3),
        stdout_path=str(out),
    )
    async with resurrect_workers(temporal_client, config, cluster):
        yield Job7(temporal_client, config, cluster)


async def test_the_recovery_of_attempt_1_names_the_node_attempt_1_lost(job7: Job7) -> None:
    first = await job7.fails()
    assert first.diagnosis is not None and first.diagnosis.culprit_hosts == ["node2"]
    assert first.recovered, first.notes
    out = job7.cluster.out
    assert first.next_attempt_output == [
        OutputMark(path=str(out), inode=out.stat().st_ino, offset=len(PRINTS[0]))
    ]

    second = await job7.fails()
    assert second.diagnosis is not None
    assert second.diagnosis.fault_class is FaultClass.GPU_HARDWARE
    assert second.diagnosis.culprit_hosts == ["node4"], second.notes
    assert not any("did not run on" in note for note in second.notes), second.notes
    assert not any("begins is not known" in note for note in second.notes), second.notes
    # no node agent here: node4 is named, and kept in service until a second source agrees
    assert any(
        note.startswith("not draining node4: only the job's output") for note in second.notes
    )
    assert second.next_attempt_output[0].offset == len(PRINTS[0]) + len(PRINTS[1])


async def test_without_an_earlier_recovery_the_tail_is_read_with_a_note(job7: Job7) -> None:
    """Attempt 1 of a job whose first attempt no recovery ended (Slurm requeued it, the
    service was down): where attempt 1 begins is not known, and the recovery says so."""
    with job7.cluster.out.open("a") as file:
        file.write(PRINTS[1])
    job7.cluster.jobs["7"] = job7.cluster.jobs["7"].model_copy(
        update={"restart_count": 1, "nodes": ["node3", "node4"]}
    )
    outcome = await job7.fails()
    earlier = f"recover/{job7.config.cluster.name}/7/0"
    assert outcome.diagnosis is not None
    summary = outcome.diagnosis.summary
    assert "where attempt 1's output begins is not known" in summary, summary
    assert f"no outcome of {earlier} to read" in summary, summary
