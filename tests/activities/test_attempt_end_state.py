"""A step's CANCELLED teardown line is a person's cancel only when Slurm says so: a report
sent while the attempt ran (a node agent's silence) is judged by how the attempt ended."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from support.builders import recovery_context
from temporalio.testing import ActivityEnvironment

from resurrect.activities.attempt_lines import attempt_end_state
from resurrect.activities.recovery import RecoveryActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    Diagnosis,
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    RecoveryAction,
    RecoveryContext,
)
from resurrect.rules.engine import default_engine
from resurrect.testing import FakeScheduler

# job 7 of the suite's soak: node4's slurmd and ranks killed; srun took the step down
TORN_DOWN = (
    "srun: error: node4: task 1: Killed\n"
    "srun: launch/slurm: _step_signal: Terminating StepId=7.0\n"
    "slurmstepd-node3: error: *** STEP 7.0 ON node3 CANCELLED AT 2026-12-03T18:53:21 ***\n"
    "srun: error: node3: task 0: Terminated\n"
)


def silence_then(out: Path, state: JobState, restart_count: int = 0) -> RecoveryContext:
    job = JobInfo(
        job_id="7",
        state=state,
        user_id=os.getuid(),
        nodes=["node3", "node4"],
        restart_count=restart_count,
        stdout_path=str(out),
    )
    report = Interruption(
        cluster="c1",
        job_id="7",
        restart_count=0,
        source="node_agent",
        reason="node agent on node4 silent for 12s",
        observed_at=datetime.now(UTC),
        job_state=JobState.RUNNING,
        nodes=["node3", "node4"],
        suspect_nodes=["node4"],
    )
    return recovery_context(report, job)


def test_the_attempt_ended_as_slurm_says_once_it_has() -> None:
    out = Path("/nonexistent")
    assert attempt_end_state(silence_then(out, JobState.FAILED)) is JobState.FAILED
    assert attempt_end_state(silence_then(out, JobState.RUNNING)) is JobState.RUNNING
    # Slurm requeued it: the job read is a later attempt, the report says how this one was
    assert attempt_end_state(silence_then(out, JobState.PENDING, 1)) is JobState.RUNNING


async def diagnosed(out: Path, output: str, state: JobState) -> Diagnosis:
    """How the recovery reads an agent's silence on job 7 whose output is ``output`` and
    whose attempt Slurm now shows ``state``."""
    out.write_text(output)
    activities = RecoveryActivities(
        FakeScheduler.with_nodes(4), ResurrectConfig(), default_engine()
    )
    bundle = silence_then(out, state)
    diagnosis, _ = await ActivityEnvironment().run(activities.read_and_attribute, bundle)
    return diagnosis


async def test_a_failed_attempts_teardown_line_is_no_cancel(tmp_path: Path) -> None:
    diagnosis = await diagnosed(tmp_path / "job-7.out", TORN_DOWN, JobState.FAILED)
    assert diagnosis.fault_class is not FaultClass.JOB_CANCELLED, diagnosis


async def test_a_cancelled_attempt_is_a_cancel(tmp_path: Path) -> None:
    diagnosis = await diagnosed(tmp_path / "job-7.out", TORN_DOWN, JobState.CANCELLED)
    assert diagnosis.fault_class is FaultClass.JOB_CANCELLED, diagnosis


async def test_a_step_srun_took_down_is_no_cancel_while_the_job_is_still_completing(
    tmp_path: Path,
) -> None:
    """The 60-minute host soak, seed 21, job 95: node6's slurmd and ranks killed, srun took
    the step down, and the recovery's second source read the job COMPLETING (node6's dead
    slurmd held it there): the step's CANCELLED line had stood as a person's cancel, the
    recovery did nothing and the job ended FAILED, lost."""
    diagnosis = await diagnosed(tmp_path / "job-7.out", TORN_DOWN, JobState.COMPLETING)
    assert diagnosis.fault_class is not FaultClass.JOB_CANCELLED, diagnosis
    assert diagnosis.action is not RecoveryAction.NONE, diagnosis


async def test_a_completing_jobs_cancel_with_no_take_down_before_it_stays_a_cancel(
    tmp_path: Path,
) -> None:
    """A person's scancel read while the job is still completing: no srun take-down of the
    step came before the cancel lines, so nothing disproves them."""
    scancelled = (
        "slurmstepd-node3: error: *** JOB 7 ON node3 CANCELLED AT 2026-12-03T18:53:21 ***\n"
        "slurmstepd-node3: error: *** STEP 7.0 ON node3 CANCELLED AT 2026-12-03T18:53:21 ***\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
    )
    diagnosis = await diagnosed(tmp_path / "job-7.out", scancelled, JobState.COMPLETING)
    assert diagnosis.fault_class is FaultClass.JOB_CANCELLED, diagnosis
