"""``recovery.wait_running`` records where the next attempt's output begins.

A requeued job may append every attempt to one output file. The sizes of its files taken
between two reads that found the job pending (its earlier run gone, the next not started)
are where the next attempt begins: the next recovery reads the files from there. A job seen
pending only once, or never, gives no mark (its next attempt may have written already)."""

from __future__ import annotations

import os
from pathlib import Path

from resurrect.activities.steps import wait_running
from resurrect.contracts import JobInfo, JobState, OutputMark, RecoveryState, StepInput
from resurrect.testing import FakeScheduler
from resurrect.testing.steps import make_step_input, run_step

EARLIER = "attempt 0\nnode2: [rank1] RuntimeError: CUDA error: uncorrectable ECC error\n"
NEXT = "attempt 1 on node3\n"


class StartsAfterPendingReads(FakeScheduler):
    """Job 42 stays pending for ``pending_reads`` reads; then its next attempt starts on
    node1 and node3 and prints ``NEXT`` to the same file."""

    def __init__(self, out: Path, pending_reads: int) -> None:
        super().__init__()
        self.out = out
        self.pending_reads = pending_reads

    async def get_job(self, job_id: str) -> JobInfo:
        job = await super().get_job(job_id)
        if job.state is JobState.PENDING:
            if self.pending_reads > 0:
                self.pending_reads -= 1
                return job
            with self.out.open("a") as file:
                file.write(NEXT)
            job = job.model_copy(update={"state": JobState.RUNNING, "nodes": ["node1", "node3"]})
            self.jobs[job_id] = job
        return job


def requeued(tmp_path: Path, pending_reads: int) -> tuple[StartsAfterPendingReads, StepInput]:
    out = tmp_path / "slurm-42.out"
    out.write_text(EARLIER)
    scheduler = StartsAfterPendingReads(out, pending_reads)
    step_input = make_step_input(
        "recovery.wait_running",
        {"poll_interval_s": 0.01},
        state=RecoveryState(requeued=True, excluded_nodes=["node2"]),
    )
    job = step_input.bundle.job.model_copy(
        update={
            "state": JobState.PENDING,
            "restart_count": 1,
            "user_id": os.getuid(),
            "stdout_path": str(out),
        }
    )
    scheduler.jobs["42"] = job
    return scheduler, step_input


async def test_sizes_taken_while_the_job_was_pending_mark_the_next_attempt(tmp_path: Path) -> None:
    scheduler, step_input = requeued(tmp_path, pending_reads=3)
    result = await run_step(wait_running, scheduler=scheduler, step_input=step_input)
    assert result.running_again
    out = scheduler.out
    assert result.next_attempt_output == [
        OutputMark(path=str(out), inode=out.stat().st_ino, offset=len(EARLIER))
    ]
    assert out.read_bytes()[result.next_attempt_output[0].offset :] == NEXT.encode()


async def test_a_job_seen_pending_once_gives_no_mark(tmp_path: Path) -> None:
    scheduler, step_input = requeued(tmp_path, pending_reads=1)
    result = await run_step(wait_running, scheduler=scheduler, step_input=step_input)
    assert result.running_again and result.next_attempt_output == []


async def test_a_job_already_running_gives_no_mark(tmp_path: Path) -> None:
    scheduler, step_input = requeued(tmp_path, pending_reads=0)
    result = await run_step(wait_running, scheduler=scheduler, step_input=step_input)
    assert result.running_again and result.next_attempt_output == []
