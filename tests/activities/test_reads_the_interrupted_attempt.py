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
from support.job_output import appended_attempts
from temporalio.testing import ActivityEnvironment

from resurrect.activities.recovery import RecoveryActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    OutputMark,
    RecoveryContext,
)
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
