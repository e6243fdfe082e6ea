"""Deciding a hang or a straggler (decide.py rules 7 and 8), as specifications.

A hang's culprit node comes from the ranks' stacks (a straggler's from who waits for whom):
resurrect's own probes of a job its owner controls. They say where the job stalled, not that
the node is bad: the node is drained, and the restart free, only when the node agent or
Slurm has hardware evidence about it.
"""

from __future__ import annotations

from support.decisions import decision_for

from resurrect.contracts import (
    Diagnosis,
    Evidence,
    FaultClass,
    JobInfo,
    JobPolicy,
    JobState,
    RecoveryAction,
    RecoveryContext,
    SignalKind,
)
from resurrect.evidence_trust import HANG_HISTORY_RULE, hardware_evidence
from resurrect.plans.decide import decide
from resurrect.plans.loader import load_plans
from resurrect.testing.steps import make_step_input

JOB = JobInfo(job_id="7", state=JobState.RUNNING, nodes=["gpu-1", "gpu-2"])
POLICY = JobPolicy(max_restarts=2)


def culprit_stack(fault: FaultClass = FaultClass.JOB_HANG, host: str = "gpu-2") -> Evidence:
    """What the follower sends: the culprit rank's stack (or the straggler's arithmetic)."""
    return Evidence(
        kind=SignalKind.STACK_DUMP if fault is FaultClass.JOB_HANG else SignalKind.PROGRESS,
        text=f"culprit: rank 1 on {host} (pid 9, state T): stopped at main (train.py:80)",
        rule="stacks.stopped" if fault is FaultClass.JOB_HANG else "progress.straggler.waits",
        role="root",
        fault_class=fault,
        host=host,
        rank=1,
    )


def hang(*extra: Evidence, fault: FaultClass = FaultClass.JOB_HANG) -> Diagnosis:
    return Diagnosis(
        fault_class=fault,
        action=RecoveryAction.RESTART,
        confidence=0.9,
        evidence=[culprit_stack(fault), *extra],
    )


def reading(
    rule: str,
    fault: FaultClass,
    host: str = "gpu-2",
    *,
    role: str = "root",
    source: str | None = "node_agent",
    kind: SignalKind = SignalKind.GPU_EVENT,
) -> Evidence:
    return Evidence.model_validate(
        {
            "kind": kind,
            "text": f"{rule} on {host}",
            "rule": rule,
            "role": role,
            "fault_class": fault,
            "host": host,
            "source": source,
        }
    )


XID = reading("xid.48", FaultClass.GPU_HARDWARE, kind=SignalKind.KERNEL_LOG)
THROTTLED = reading(
    "gpu.clocks.hw_slowdown",
    FaultClass.JOB_STRAGGLER,
    role="diagnostic",
    kind=SignalKind.GPU_METRIC,
)


def test_a_hang_without_hardware_evidence_restarts_in_place_and_is_charged() -> None:
    decision = decision_for(hang(), JOB, POLICY, charged_restarts=0)
    assert decision.action is RecoveryAction.RESTART and decision.requeue
    assert decision.drain_nodes == [] and decision.exclude_nodes == []
    assert decision.counts_against_budget
    assert any("no node agent or Slurm hardware evidence" in r for r in decision.reasons)
    assert any("restart charged to budget (1/2)" in r for r in decision.reasons)


def test_repeated_hangs_without_hardware_evidence_run_into_the_budget() -> None:
    decision = decision_for(hang(), JOB, POLICY, charged_restarts=2)
    assert decision.action is RecoveryAction.STOP and not decision.requeue


def test_a_hang_whose_culprit_node_has_an_xid_drains_it_and_is_free() -> None:
    decision = decision_for(hang(XID), JOB, POLICY, charged_restarts=2)  # budget spent
    assert decision.action is RecoveryAction.DRAIN_AND_RESTART
    assert decision.drain_nodes == ["gpu-2"] and decision.exclude_nodes == ["gpu-2"]
    assert decision.requeue and not decision.counts_against_budget
    assert any("hardware evidence from the node agent (xid.48" in r for r in decision.reasons)


def test_every_kind_of_hardware_evidence_counts() -> None:
    for evidence in (
        reading("gpu.ecc.uncorrectable", FaultClass.GPU_HARDWARE),
        reading("gpu.nvml.lost", FaultClass.GPU_HARDWARE),
        reading("gpu.retired_pages.pending", FaultClass.GPU_HARDWARE, role="diagnostic"),
        reading("gpu.nvlink.down", FaultClass.NETWORK_FABRIC),
        THROTTLED,
        reading(
            "scheduler.node_state",
            FaultClass.NODE_LOST,
            source=None,
            kind=SignalKind.SCHEDULER_STATE,
        ),
    ):
        decision = decision_for(hang(evidence), JOB, POLICY, charged_restarts=0)
        assert decision.drain_nodes == ["gpu-2"], evidence.rule
        assert not decision.counts_against_budget, evidence.rule


def test_hardware_evidence_must_come_from_a_second_source() -> None:
    printed = reading("xid.48", FaultClass.GPU_HARDWARE, source=None, kind=SignalKind.JOB_LOG)
    assert hardware_evidence([printed], "gpu-2") == []
    decision = decision_for(hang(printed), JOB, POLICY, charged_restarts=0)
    assert decision.drain_nodes == [] and decision.counts_against_budget


def test_hardware_evidence_about_another_node_does_not_drain_the_culprit() -> None:
    elsewhere = reading("xid.48", FaultClass.GPU_HARDWARE, host="gpu-1")
    decision = decision_for(hang(elsewhere), JOB, POLICY, charged_restarts=0)
    assert decision.drain_nodes == [] and decision.counts_against_budget


def test_a_software_throttle_is_not_hardware_evidence() -> None:
    capped = reading("gpu.power.sw_cap", FaultClass.JOB_STRAGGLER, role="diagnostic")
    assert hardware_evidence([capped], "gpu-2") == []


def test_hardware_evidence_sent_with_the_report_counts() -> None:
    """The node agent's readings of the culprit's GPUs travel with the hang report (they are
    diagnostic, so attribution does not list them in the diagnosis)."""
    decision = decision_for(hang(), JOB, POLICY, charged_restarts=0, reported=[THROTTLED])
    assert decision.drain_nodes == ["gpu-2"] and not decision.counts_against_budget


def test_a_culprit_the_job_did_not_run_on_is_never_drained() -> None:
    stray = Diagnosis(
        fault_class=FaultClass.JOB_HANG,
        action=RecoveryAction.RESTART,
        confidence=0.9,
        evidence=[culprit_stack(host="login-1"), XID.model_copy(update={"host": "login-1"})],
    )
    decision = decision_for(stray, JOB, POLICY, charged_restarts=0)
    assert decision.drain_nodes == [] and decision.counts_against_budget
    assert any("not draining hosts the job did not run on: login-1" in r for r in decision.reasons)


def test_a_hang_with_no_culprit_named_restarts_in_place() -> None:
    nobody = Diagnosis(
        fault_class=FaultClass.JOB_HANG, action=RecoveryAction.RESTART, confidence=0.5
    )
    decision = decision_for(nobody, JOB, POLICY, charged_restarts=0)
    assert decision.action is RecoveryAction.RESTART and decision.counts_against_budget
    assert any("no culprit node of this job named" in r for r in decision.reasons)


def test_a_straggler_follows_the_same_rule() -> None:
    slow = hang(fault=FaultClass.JOB_STRAGGLER)
    in_place = decision_for(slow, JOB, POLICY, charged_restarts=0)
    assert in_place.drain_nodes == [] and in_place.counts_against_budget
    throttled = decision_for(slow, JOB, POLICY, charged_restarts=0, reported=[THROTTLED])
    assert throttled.action is RecoveryAction.DRAIN_AND_RESTART
    assert throttled.drain_nodes == ["gpu-2"] and not throttled.counts_against_budget


def bundle(*reported: Evidence) -> RecoveryContext:
    incident = make_step_input("recovery.requeue_job", job=JOB).bundle
    interruption = incident.interruption.model_copy(update={"evidence": list(reported)})
    return incident.model_copy(update={"policy": POLICY, "interruption": interruption})


def history(node: str, jobs: str) -> Evidence:
    return Evidence(
        kind=SignalKind.PROGRESS,
        text=f"{node} was the culprit of hangs of jobs {jobs}",
        rule=HANG_HISTORY_RULE,
        host=node,
        fields={"jobs": jobs, "window_s": "604800"},
        source="sensor",
    )


def test_the_shipped_plans_drain_a_culprit_with_hardware_evidence() -> None:
    choice = decide(bundle(THROTTLED), hang(), load_plans(), charged_restarts=0)
    assert choice.plan is not None and choice.plan.name == "drain-and-restart"
    in_place = decide(bundle(), hang(), load_plans(), charged_restarts=0)
    assert in_place.plan is not None and in_place.plan.name == "restart-from-checkpoint"


def test_a_node_implicated_in_hangs_of_other_jobs_is_flagged_suspect() -> None:
    choice = decide(bundle(history("gpu-2", "3,7,12")), hang(), load_plans(), 0)
    assert choice.suspect_nodes == ["gpu-2"]
    [note] = [n for n in choice.notes if "suspect" in n]
    assert "jobs 12, 3" in note and "604800 s" in note
    assert choice.decision.drain_nodes == []  # a suspect is flagged, not drained


def test_a_node_implicated_only_in_this_jobs_hangs_is_not_a_suspect() -> None:
    assert decide(bundle(history("gpu-2", "7")), hang(), load_plans(), 0).suspect_nodes == []
    assert decide(bundle(history("gpu-1", "3")), hang(), load_plans(), 0).suspect_nodes == []
    assert decide(bundle(), hang(), load_plans(), 0).suspect_nodes == []
