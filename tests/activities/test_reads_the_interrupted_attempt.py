"""A recovery judges the interrupted attempt's output, not the attempts before it.

Job 7 appends every attempt to one output file. Attempt 0 died naming node2 (since excluded);
attempt 1 ran on node3 and node4 and died naming node4. The recovery of attempt 1 reads the
file from where attempt 1 began (a mark resurrect took, never the job's word) and names node4
only; without any mark it reads the tail as it is and says so."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from support.builders import recovery_context
from support.decisions import decision_for
from support.job_output import appended_attempts
from temporalio.testing import ActivityEnvironment

from resurrect.activities.earlier_recoveries import EarlierRecoveries
from resurrect.activities.recovery import RecoveryActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    Diagnosis,
    FaultClass,
    Interruption,
    JobInfo,
    JobPolicy,
    JobState,
    OutputMark,
    RecoveryContext,
)
from resurrect.job_incarnation import Incarnation
from resurrect.rules.engine import default_engine
from resurrect.testing import FakeScheduler

ATTEMPT_0 = "step 45\nnode2: [rank1] RuntimeError: CUDA error: uncorrectable ECC error\n"
ATTEMPT_1 = "step 45\nnode4: [rank1] RuntimeError: CUDA error: uncorrectable ECC error\n"


def attempt_1(out: Path, marks: list[OutputMark]) -> RecoveryContext:
    job = JobInfo(
        job_id="7",
        state=JobState.FAILED,
        user_id=os.getuid(),
        nodes=["node3", "node4"],
        excluded_nodes=["node2"],
        restart_count=1,
        stdout_path=str(out),
    )
    report = Interruption(
        cluster="c1",
        job_id="7",
        restart_count=1,
        source="log_tail",
        reason="gpu.hardware in job output",
        observed_at=datetime.now(UTC),
        nodes=["node3", "node4"],
        output_marks=marks,
    )
    return recovery_context(report, job)


async def test_the_recovery_of_attempt_1_names_attempt_1s_node_only(tmp_path: Path) -> None:
    out, began = appended_attempts(tmp_path, ATTEMPT_0, ATTEMPT_1)
    activities = RecoveryActivities(
        FakeScheduler.with_nodes(4), ResurrectConfig(), default_engine()
    )
    bundle = attempt_1(out, [began])
    diagnosis, _ = await ActivityEnvironment().run(activities.read_and_attribute, bundle)
    assert diagnosis.fault_class is FaultClass.GPU_HARDWARE
    assert diagnosis.culprit_hosts == ["node4"]
    assert {e.host for e in diagnosis.evidence if e.host} == {"node4"}
    assert all(e.line is not None and e.line > 2 for e in diagnosis.evidence if e.line)
    assert "node2" not in diagnosis.summary, diagnosis.summary


async def test_without_any_mark_the_tail_is_read_as_it_is_with_a_note(tmp_path: Path) -> None:
    out, _ = appended_attempts(tmp_path, ATTEMPT_0, ATTEMPT_1)
    activities = RecoveryActivities(
        FakeScheduler.with_nodes(4), ResurrectConfig(), default_engine()
    )
    diagnosis, _ = await ActivityEnvironment().run(
        activities.read_and_attribute, attempt_1(out, [])
    )
    assert f"{out}: where attempt 1's output begins is not known" in diagnosis.summary
    assert "may hold earlier attempts' lines" in diagnosis.summary


async def test_a_node_lost_that_the_attempt_never_ran_on_is_no_fault_of_it(tmp_path: Path) -> None:
    """Attempt 0's srun reported node2 lost; attempt 1 (on node3, node4) then failed
    because its srun could not reach slurmctld. Read without a mark, the shared tail holds
    both: the earlier attempt's node loss is left out of attempt 1's diagnosis, with a note."""
    lost_earlier = "srun: error: Node failure on node2\n"
    no_controller = (
        "srun: error: Unable to confirm allocation for job 7: Unable to contact slurm"
        " controller (connect failure)\n"
    )
    out, _ = appended_attempts(tmp_path, lost_earlier, no_controller)
    activities = RecoveryActivities(
        FakeScheduler.with_nodes(4), ResurrectConfig(), default_engine()
    )
    diagnosis, _ = await ActivityEnvironment().run(
        activities.read_and_attribute, attempt_1(out, [])
    )
    assert diagnosis.fault_class is not FaultClass.NODE_LOST, diagnosis
    assert "node2" not in diagnosis.culprit_hosts
    assert "not a fault of attempt 1 (on node3,node4): 1 line(s) of an earlier attempt" in (
        diagnosis.summary
    ), diagnosis.summary


async def test_a_node_lost_of_the_attempts_own_nodes_still_counts(tmp_path: Path) -> None:
    out, _ = appended_attempts(tmp_path, "step 1\n", "srun: error: Node failure on node4\n")
    activities = RecoveryActivities(
        FakeScheduler.with_nodes(4), ResurrectConfig(), default_engine()
    )
    diagnosis, _ = await ActivityEnvironment().run(
        activities.read_and_attribute, attempt_1(out, [])
    )
    assert diagnosis.fault_class is FaultClass.NODE_LOST
    assert diagnosis.culprit_hosts == ["node4"]


# Job 5's output on namespaced hosts (the 2.5-minute host soak, seed 51): attempt 0 ran on
# node3, which froze; its recovery drained node3 and requeued the job onto node5. When node3
# thawed, attempt 0's srun heard of its node's failure and cancelled step 5.0: attempt 1's.
THAWED_SRUN = """\
[rank0] checkpoint /ckpt/step_40
srun: error: Node failure on node3
srun: Job step aborted: Waiting up to 4 seconds for job step to finish.
slurmstepd-node5: error: *** STEP 5.0 ON node5 CANCELLED AT 2026-12-04T05:11:30 ***
slurmstepd-node3: error: *** JOB 5 ON node3 CANCELLED AT 2026-12-04T05:11:30 DUE TO NODE \
FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***
srun: error: node5: task 0: Killed
srun: launch/slurm: _step_signal: Terminating StepId=5.0
"""


def attempt_1_on_node5(out: Path, marks: list[OutputMark], state: JobState) -> RecoveryContext:
    bundle = attempt_1(out, marks)
    job = bundle.job.model_copy(update={"nodes": ["node5"], "state": state})
    report = bundle.interruption.model_copy(update={"nodes": ["node5"]})
    return bundle.model_copy(update={"job": job, "interruption": report})


def lost_by_attempt_0(*nodes: str) -> EarlierRecoveries:
    return EarlierRecoveries(Incarnation(os.getuid(), 1), lost_nodes=frozenset(nodes))


async def read_attempt_1(
    tmp_path: Path, earlier: EarlierRecoveries | None, state: JobState = JobState.FAILED
) -> Diagnosis:
    out, began = appended_attempts(tmp_path, "step 1\n", THAWED_SRUN)
    activities = RecoveryActivities(
        FakeScheduler.with_nodes(5), ResurrectConfig(), default_engine()
    )
    bundle = attempt_1_on_node5(out, [began], state)
    diagnosis, _ = await ActivityEnvironment().run(
        activities.read_and_attribute, bundle, (), None, earlier
    )
    return diagnosis


async def test_an_attempt_whose_step_an_earlier_attempts_leftover_cancelled_is_a_node_loss(
    tmp_path: Path,
) -> None:
    """Slurm numbers a requeued job's steps from 0 again: attempt 0's srun, thawed on the
    node its recovery found lost, cancels attempt 1's step of the same number. That loss is
    why attempt 1 ended (not its owner's memory, as the bare "Killed" alone would say), and
    the node named is the earlier attempt's, not attempt 1's."""
    diagnosis = await read_attempt_1(tmp_path, lost_by_attempt_0("node3"))
    assert diagnosis.fault_class is FaultClass.NODE_LOST, diagnosis
    assert "node5" not in diagnosis.culprit_hosts
    assert "ended by an earlier attempt's leftovers on node3" in diagnosis.summary
    # restarted free of charge (the record, not the job, says node3 was lost); node5, where
    # attempt 1 ran, is not drained
    job = attempt_1_on_node5(tmp_path / "slurm-7.out", [], JobState.FAILED).job
    decision = decision_for(diagnosis, job, JobPolicy(), charged_restarts=0)
    assert decision.requeue and not decision.counts_against_budget, decision
    assert "node5" not in decision.drain_nodes, decision


async def test_without_resurrects_record_of_that_loss_the_lines_stay_the_earlier_attempts(
    tmp_path: Path,
) -> None:
    """The job prints its output: a node failure line of a node no earlier recovery found
    lost (or no record read) makes no node loss of this attempt."""
    for case, earlier in enumerate((None, lost_by_attempt_0(), lost_by_attempt_0("node2"))):
        (tmp_path / str(case)).mkdir()
        diagnosis = await read_attempt_1(tmp_path / str(case), earlier)
        assert diagnosis.fault_class is not FaultClass.NODE_LOST, diagnosis
        assert "not a fault of attempt 1" in diagnosis.summary


async def test_an_attempt_that_ended_cancelled_stays_cancelled(tmp_path: Path) -> None:
    diagnosis = await read_attempt_1(tmp_path, lost_by_attempt_0("node3"), JobState.CANCELLED)
    assert diagnosis.fault_class is not FaultClass.NODE_LOST, diagnosis
