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
