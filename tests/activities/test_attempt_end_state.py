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

CHAOS = Path(__file__).resolve().parents[1] / "fixtures" / "chaos"

# job 7 of the suite's soak: node4's slurmd and ranks killed; srun took the step down
TORN_DOWN = (
    "srun: error: node4: task 1: Killed\n"
    "srun: launch/slurm: _step_signal: Terminating StepId=7.0\n"
    "slurmstepd-node3: error: *** STEP 7.0 ON node3 CANCELLED AT 2026-12-03T18:53:21 ***\n"
    "srun: error: node3: task 0: Terminated\n"
)


def silence_then(
    out: Path,
    state: JobState,
    restart_count: int = 0,
    reason: str = "",
    silent: str = "node4",
) -> RecoveryContext:
    """Job 7 on node3 and ``silent``, whose agent fell silent while it ran; Slurm now shows
    it ``state`` (with ``reason``)."""
    job = JobInfo(
        job_id="7",
        state=state,
        state_reason=reason,
        user_id=os.getuid(),
        nodes=["node3", silent],
        restart_count=restart_count,
        stdout_path=str(out),
    )
    report = Interruption(
        cluster="c1",
        job_id="7",
        restart_count=0,
        source="node_agent",
        reason=f"node agent on {silent} silent for 12s",
        observed_at=datetime.now(UTC),
        job_state=JobState.RUNNING,
        nodes=["node3", silent],
        suspect_nodes=[silent],
    )
    return recovery_context(report, job)


def test_the_attempt_ended_as_slurm_says_once_it_has() -> None:
    out = Path("/nonexistent")
    assert attempt_end_state(silence_then(out, JobState.FAILED)) is JobState.FAILED
    assert attempt_end_state(silence_then(out, JobState.RUNNING)) is JobState.RUNNING
    # Slurm requeued it: the job read is a later attempt, the report says how this one was
    assert attempt_end_state(silence_then(out, JobState.PENDING, 1)) is JobState.RUNNING


def test_an_attempt_still_completing_ends_as_its_reason_says() -> None:
    """Slurm 22.05 shows a job whose steps are still torn down as COMPLETING alone; the
    reason slurmctld set when it ended the job names the state it is ending in."""
    out = Path("/nonexistent")
    completing = JobState.COMPLETING
    assert attempt_end_state(silence_then(out, completing, reason="NonZeroExitCode")) is (
        JobState.FAILED
    )
    assert attempt_end_state(silence_then(out, completing, reason="NodeDown")) is (
        JobState.NODE_FAIL
    )
    assert attempt_end_state(silence_then(out, completing, reason="TimeLimit")) is (
        JobState.TIMEOUT
    )
    # a person's scancel leaves the reason as it was: nothing said yet
    assert attempt_end_state(silence_then(out, completing)) is completing


async def diagnosed(
    out: Path, output: str, state: JobState, reason: str = "", silent: str = "node4"
) -> Diagnosis:
    """How the recovery reads an agent's silence on job 7 whose output is ``output`` and
    whose attempt Slurm now shows ``state`` (with ``reason``)."""
    out.write_text(output)
    activities = RecoveryActivities(
        FakeScheduler.with_nodes(6), ResurrectConfig(), default_engine()
    )
    bundle = silence_then(out, state, reason=reason, silent=silent)
    diagnosis, _ = await ActivityEnvironment().run(activities.read_and_attribute, bundle)
    return diagnosis


def assert_a_fault_to_recover(diagnosis: Diagnosis) -> None:
    """No person's cancel: the recovery acts on it."""
    assert diagnosis.fault_class is not FaultClass.JOB_CANCELLED, diagnosis
    assert diagnosis.action is not RecoveryAction.NONE, diagnosis


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
    assert_a_fault_to_recover(diagnosis)


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


async def test_a_step_srun_took_down_first_is_no_cancel_though_srun_ends_it_again_later(
    tmp_path: Path,
) -> None:
    """The 60-minute host soak, seed 21, job 106: node4 cut off one way, its rank fenced
    (``node4: task 1: Killed``); srun took the step down (``_step_signal: Terminating``),
    node3's step printed CANCELLED, and srun's ``Force Terminated StepId=106.0`` came last.
    The last take-down line stood for the take-down, after the cancel line, so the cancel
    stood as a person's: the recovery did nothing and the job was lost."""
    output = (CHAOS / "fenced-rank-step-taken-down-twice.log").read_text()
    diagnosis = await diagnosed(tmp_path / "job-106.out", output, JobState.COMPLETING)
    assert_a_fault_to_recover(diagnosis)


async def test_a_launch_that_failed_on_an_unreachable_node_is_that_nodes_loss(
    tmp_path: Path,
) -> None:
    """The 60-minute host soak, seed 21, job 105: started on node5 just after its slurmd was
    killed; srun could not launch there (``Task launch for StepId=105.0 failed on node
    node5: Communication connection failure``) and took the step down before node3's step
    printed CANCELLED; Slurm showed the job COMPLETING. The cancel had stood as a person's
    and the job was lost."""
    output = (CHAOS / "launch-failed-node-lost-completing.log").read_text()
    diagnosis = await diagnosed(
        tmp_path / "job-105.out", output, JobState.COMPLETING, silent="node5"
    )
    assert diagnosis.fault_class is FaultClass.NODE_LOST, diagnosis
    assert diagnosis.culprit_hosts == ["node5"], diagnosis
    assert diagnosis.action is not RecoveryAction.NONE, diagnosis


async def test_a_completing_job_whose_reason_says_it_failed_has_no_person_cancel(
    tmp_path: Path,
) -> None:
    """With no take-down line at all, Slurm's reason (``NonZeroExitCode``) already says the
    attempt failed: its step's cancel line is no person's."""
    output = (
        "srun: error: node4: task 1: Killed\n"
        "slurmstepd-node3: error: *** STEP 7.0 ON node3 CANCELLED AT 2026-12-03T18:53:21 ***\n"
    )
    diagnosis = await diagnosed(
        tmp_path / "job-7.out", output, JobState.COMPLETING, reason="NonZeroExitCode"
    )
    assert diagnosis.fault_class is not FaultClass.JOB_CANCELLED, diagnosis
