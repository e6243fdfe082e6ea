"""The sentences the Temporal UI shows for a recovery and its activities."""

from __future__ import annotations

from datetime import UTC, datetime

from support.builders import recovery_context

from resurrect.contracts import (
    CheckpointVerdict,
    Diagnosis,
    FaultClass,
    Interruption,
    JobInfo,
    JobPolicy,
    JobState,
    RecoveryAction,
    RecoveryDecision,
    RecoveryOutcome,
    StepInput,
)
from resurrect.telemetry.summary import activity_summary, outcome_sentence, reported_summary

REPORT = Interruption(
    cluster="c",
    job_id="12",
    restart_count=0,
    source="slurm_watcher",
    reason="node node2 is DOWN",
    observed_at=datetime(2026, 11, 30, tzinfo=UTC),
    nodes=["node1", "node2"],
    suspect_nodes=["node2"],
    fault_hint=FaultClass.NODE_LOST,
)


def outcome(**update: object) -> RecoveryOutcome:
    base = RecoveryOutcome(
        workflow_id="recover/c/12/0",
        cluster="c",
        job_id="12",
        restart_count=0,
        mode="act",
        fault_class=FaultClass.NODE_LOST,
        action=RecoveryAction.DRAIN_AND_RESTART,
        recovered=True,
        outcome="recovered",
        drained_nodes=["node2"],
        requeued=True,
        job_running_again=True,
    )
    return base.model_copy(update=update)


def test_a_recovered_node_loss_reads_as_one_sentence() -> None:
    assert outcome_sentence(outcome(), 3.42, REPORT) == (
        "node.lost on node2 (job 12): drained node2, requeued, running again in 3.4 s"
    )


def test_the_checkpoint_and_a_failure_are_named() -> None:
    verdict = CheckpointVerdict(root="/c", verified=True, resume_step=40)
    text = outcome_sentence(
        outcome(recovered=False, outcome="requeued_not_running", checkpoint=verdict), 900, REPORT
    )
    assert text == (
        "node.lost on node2 (job 12): drained node2, resumes from step 40, requeued,"
        " requeued not running after 900.0 s"
    )


def test_observe_mode_says_what_it_would_have_done() -> None:
    text = outcome_sentence(
        outcome(mode="observe", would_have=["would drain node2"], drained_nodes=[]), 1, REPORT
    )
    assert text == "node.lost on node2 (job 12): observe mode, would have: would drain node2"


def test_the_static_summary_names_fault_job_nodes_and_sensor() -> None:
    assert reported_summary(REPORT) == (
        "node.lost of job 12 on node2 (attempt 0), reported by slurm_watcher: node node2 is DOWN"
    )
    long = REPORT.model_copy(update={"reason": "x" * 2000})
    assert len(reported_summary(long)) <= 400


def test_each_step_gets_its_own_summary() -> None:
    job = JobInfo(job_id="12", state=JobState.NODE_FAIL, nodes=["node1", "node2"])
    bundle = recovery_context(REPORT, job, policy=JobPolicy(checkpoint_dir="/ckpt/run7"))
    step = StepInput(
        workflow_id="w",
        activity="recovery.drain_nodes",
        observe=False,
        bundle=bundle,
        diagnosis=Diagnosis(
            fault_class=FaultClass.NODE_LOST,
            action=RecoveryAction.DRAIN_AND_RESTART,
            confidence=1,
        ),
        decision=RecoveryDecision(
            action=RecoveryAction.DRAIN_AND_RESTART,
            drain_nodes=["node2"],
            exclude_nodes=["node2"],
        ),
    )
    assert activity_summary("recovery.drain_nodes", [step]) == "drain node2"
    assert (
        activity_summary("recovery.verify_checkpoint", [step])
        == "verify the checkpoint in /ckpt/run7"
    )
    assert activity_summary("recovery.requeue_job", [step]) == "requeue job 12 excluding node2"
    assert activity_summary("recovery.wait_running", [step]) == "wait until job 12 runs again"
    dry = step.model_copy(update={"observe": True})
    assert activity_summary("recovery.drain_nodes", [dry]) == "drain node2 (observe mode)"
    assert activity_summary("recovery.gather_evidence", [REPORT]) == "gather evidence on job 12"
