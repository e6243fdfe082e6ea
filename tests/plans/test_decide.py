from __future__ import annotations

from support.decisions import decision_for, diagnosis_of, seen

from resurrect.contracts import (
    Diagnosis,
    Evidence,
    FaultClass,
    JobInfo,
    JobPolicy,
    JobState,
    NodeInfo,
    RecoveryAction,
    RecoveryContext,
    SignalKind,
)
from resurrect.evidence_trust import evidence_source, match_job_nodes, restart_action
from resurrect.plans.decide import decide
from resurrect.plans.models import ResolvedPlan, WhenSpec
from resurrect.testing.steps import make_step_input

JOB = JobInfo(job_id="1", state=JobState.FAILED, nodes=["gpu-1", "gpu-2"], excluded_nodes=["gpu-9"])
POLICY = JobPolicy(max_restarts=2)


def test_gpu_fault_drains_the_culprit_and_keeps_earlier_exclusions() -> None:
    plan = decision_for(
        diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-2.cluster.local"]),
        JOB,
        POLICY,
        charged_restarts=9,
    )
    assert plan.action is RecoveryAction.DRAIN_AND_RESTART
    assert plan.drain_nodes == ["gpu-2"]
    assert plan.exclude_nodes == ["gpu-9", "gpu-2"]
    assert plan.requeue and not plan.counts_against_budget  # infra: free even over budget


def test_hosts_the_job_did_not_use_are_never_drained() -> None:
    plan = decision_for(
        diagnosis_of(FaultClass.NODE_LOST, ["login-1"]), JOB, POLICY, charged_restarts=0
    )
    assert plan.drain_nodes == [] and plan.action is RecoveryAction.RESTART
    assert any("login-1" in r for r in plan.reasons)


def test_application_faults_stop() -> None:
    for fault in (FaultClass.APP_ERROR, FaultClass.MEMORY_DEVICE_OOM, FaultClass.MEMORY_HOST_OOM):
        plan = decision_for(diagnosis_of(fault), JOB, POLICY, charged_restarts=0)
        assert plan.action is RecoveryAction.STOP and not plan.requeue and not plan.drain_nodes


def test_cancelled_job_is_left_alone() -> None:
    plan = decision_for(diagnosis_of(FaultClass.JOB_CANCELLED), JOB, POLICY, charged_restarts=0)
    assert plan.action is RecoveryAction.NONE and not plan.requeue


def test_budget_counts_only_for_non_infrastructure_faults() -> None:
    within = decision_for(diagnosis_of(FaultClass.PROCESS_CRASH), JOB, POLICY, charged_restarts=1)
    assert within.requeue and within.counts_against_budget
    spent = decision_for(diagnosis_of(FaultClass.PROCESS_CRASH), JOB, POLICY, charged_restarts=2)
    assert spent.action is RecoveryAction.STOP and not spent.requeue
    assert any("budget spent" in r for r in spent.reasons)


def test_a_running_job_is_requeued_like_an_ended_one() -> None:
    """No separate cancel: requeueing a running job ends its attempt (tests/scheduler/
    test_verified.py shows the requeue-hold doing it)."""
    running = JOB.model_copy(update={"state": JobState.RUNNING})
    plan = decision_for(
        diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-1"]), running, POLICY, charged_restarts=0
    )
    ended = decision_for(
        diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-1"]), JOB, POLICY, charged_restarts=0
    )
    assert plan == ended
    assert (
        plan.requeue and plan.drain_nodes == ["gpu-1"] and plan.exclude_nodes == ["gpu-9", "gpu-1"]
    )


def test_match_job_nodes_by_short_name() -> None:
    assert match_job_nodes(["GPU-1.x", "gpu-3"], ["gpu-1", "gpu-2"]) == (["gpu-1"], ["gpu-3"])


def test_a_hardware_fault_only_the_job_printed_drains_nothing_and_is_charged() -> None:
    printed = diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-2"], kind=SignalKind.JOB_LOG)
    plan = decision_for(printed, JOB, POLICY, charged_restarts=0)
    assert plan.action is RecoveryAction.RESTART and plan.drain_nodes == []
    assert plan.requeue and plan.counts_against_budget
    assert any("only the job's output names it" in r for r in plan.reasons)
    assert any("charged to the job's budget" in r for r in plan.reasons)
    # ... so repeating it runs into the restart budget
    spent = decision_for(printed, JOB, POLICY, charged_restarts=2)
    assert spent.action is RecoveryAction.STOP and not spent.drain_nodes


def test_a_plan_cannot_make_a_job_output_only_restart_free() -> None:
    printed = diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-2"], kind=SignalKind.JOB_LOG)
    plan = decision_for(printed, JOB, POLICY, charged_restarts=0, counts_against_budget=False)
    assert plan.counts_against_budget


def test_slurm_node_state_is_a_second_source() -> None:
    printed = diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-2"], kind=SignalKind.JOB_LOG)
    for node in (
        NodeInfo(name="gpu-2", state="DOWN"),
        NodeInfo(name="gpu-2", state="IDLE", flags=["NOT_RESPONDING"]),
        NodeInfo(name="gpu-2", state="IDLE", flags=["DRAIN"], reason="admin: bad fan"),
    ):
        plan = decision_for(printed, JOB, POLICY, charged_restarts=0, nodes=[node])
        assert plan.drain_nodes == ["gpu-2"], node
    # not responding without DOWN: only once the recovery's reads a grace apart both showed it
    blip = NodeInfo(name="gpu-2", state="IDLE", flags=["NOT_RESPONDING"])
    once = decision_for(printed, JOB, POLICY, charged_restarts=0, nodes=[blip], lasting=[])
    assert once.drain_nodes == []
    twice = decision_for(printed, JOB, POLICY, charged_restarts=0, nodes=[blip], lasting=["gpu-2"])
    assert twice.drain_nodes == ["gpu-2"]
    down = NodeInfo(name="gpu-2", state="DOWN", flags=["NOT_RESPONDING"])
    assert decision_for(
        printed, JOB, POLICY, charged_restarts=0, nodes=[down], lasting=[]
    ).drain_nodes
    # a node drained by resurrect itself is no second opinion
    ours = NodeInfo(name="gpu-2", state="IDLE", flags=["DRAIN"], reason="resurrect: gpu job 1")
    plan = decision_for(printed, JOB, POLICY, charged_restarts=0, nodes=[ours])
    assert plan.drain_nodes == []


def test_only_the_corroborated_culprit_is_drained() -> None:
    printed = diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-1", "gpu-2"], kind=SignalKind.JOB_LOG)
    agent = printed.model_copy(
        update={
            "evidence": [
                *printed.evidence,
                seen(FaultClass.GPU_HARDWARE, "gpu-2", SignalKind.GPU_EVENT),
            ]
        }
    )
    plan = decision_for(agent, JOB, POLICY, charged_restarts=0)
    assert plan.drain_nodes == ["gpu-2"] and not plan.counts_against_budget
    assert any("not draining gpu-1" in r for r in plan.reasons)


def test_a_log_follower_hint_is_job_output() -> None:
    hint = Evidence(kind=SignalKind.SCHEDULER_STATE, text="log_tail: Xid", source="job_output")
    assert evidence_source(hint) == "job_output"
    assert evidence_source(Evidence(kind=SignalKind.SCHEDULER_STATE, text="x")) == "scheduler"
    assert evidence_source(Evidence(kind=SignalKind.HEARTBEAT, text="x")) == "node_agent"


def plan(name: str, *, actions: list[RecoveryAction], counts: bool | None = None) -> ResolvedPlan:
    return ResolvedPlan(
        name=name,
        source="test",
        when=WhenSpec(actions=actions),
        counts_against_budget=counts,
        steps=[],
    )


def bundle() -> RecoveryContext:
    """The incident of the step tests, for JOB under POLICY."""
    incident = make_step_input("recovery.requeue", job=JOB).bundle
    return incident.model_copy(update={"policy": POLICY})


STOP_PLAN = plan("stop", actions=[RecoveryAction.STOP])
RESTART = [RecoveryAction.RESTART, RecoveryAction.DRAIN_AND_RESTART]


def test_decide_picks_the_first_plan_matching_the_decided_action() -> None:
    gpu = diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-2"])
    choice = decide(bundle(), gpu, [STOP_PLAN, plan("restart", actions=RESTART)], 0)
    assert choice.decision.action is RecoveryAction.DRAIN_AND_RESTART
    assert choice.plan is not None and choice.plan.name == "restart"
    assert choice.notes == [*choice.decision.reasons, "plan 'restart' (test)"]


def test_a_plan_charging_a_free_restart_over_budget_hands_over_to_the_stop_plan() -> None:
    gpu = diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-2"])
    plans = [plan("charged", actions=RESTART, counts=True), STOP_PLAN]
    choice = decide(bundle(), gpu, plans, charged_restarts=2)
    assert choice.decision.action is RecoveryAction.STOP and not choice.decision.requeue
    assert choice.plan is STOP_PLAN
    assert any("restart budget spent" in r for r in choice.decision.reasons)


def test_a_plan_charging_a_free_restart_within_budget_keeps_the_plan() -> None:
    gpu = diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-2"])
    plans = [plan("charged", actions=RESTART, counts=True), STOP_PLAN]
    choice = decide(bundle(), gpu, plans, charged_restarts=1)
    assert choice.plan is not None and choice.plan.name == "charged"
    assert choice.decision.counts_against_budget and choice.decision.drain_nodes == ["gpu-2"]
    assert choice.decision == decision_for(
        gpu, JOB, POLICY, charged_restarts=1, counts_against_budget=True
    )


def test_a_plan_cannot_make_a_restart_resting_on_job_output_free() -> None:
    printed = diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-2"], kind=SignalKind.JOB_LOG)
    choice = decide(bundle(), printed, [plan("free", actions=RESTART, counts=False)], 0)
    assert choice.decision.counts_against_budget and choice.decision.drain_nodes == []


def test_no_matching_plan_is_a_note() -> None:
    choice = decide(bundle(), diagnosis_of(FaultClass.APP_ERROR), [plan("r", actions=RESTART)], 0)
    assert choice.plan is None
    assert choice.notes[-1] == "no recovery plan matches action stop"


def test_drain_or_restart_is_one_rule() -> None:
    assert restart_action(FaultClass.GPU_HARDWARE, ["n1"]) is RecoveryAction.DRAIN_AND_RESTART
    assert restart_action(FaultClass.GPU_HARDWARE, []) is RecoveryAction.RESTART
    assert restart_action(FaultClass.COLLECTIVE_TIMEOUT, ["n1"]) is RecoveryAction.RESTART


def silence(host: str) -> Evidence:
    """What the node-health workflow reports when the node's agent stops heartbeating."""
    return Evidence(
        kind=SignalKind.HEARTBEAT, text="node agent silent", rule="node_agent.heartbeat_silence",
        role="root", fault_class=FaultClass.NODE_LOST, host=host, source="node_agent",
    )  # fmt: skip


def test_an_agent_falling_silent_on_a_node_slurm_still_sees_drains_nothing() -> None:
    """Found by the chaos soak (seed 1): SIGKILL of one node's agent, and 12 s of dropped
    liveness datagrams, each drained a healthy node. The node is only kept out of the
    job's restart."""
    quiet = Diagnosis(
        fault_class=FaultClass.NODE_LOST, action=RecoveryAction.DRAIN_AND_RESTART,
        confidence=0.9, culprit_hosts=["gpu-2"], evidence=[silence("gpu-2")],
    )  # fmt: skip
    up = NodeInfo(name="gpu-2", state="ALLOCATED")
    plan = decision_for(quiet, JOB, POLICY, charged_restarts=0, nodes=[up])
    assert plan.drain_nodes == []
    assert plan.exclude_nodes == ["gpu-9", "gpu-2"] and plan.requeue
    assert any("only its node agent's silence" in r for r in plan.reasons)


def test_an_agent_falling_silent_on_a_node_slurm_lost_too_drains_it() -> None:
    quiet = Diagnosis(
        fault_class=FaultClass.NODE_LOST, action=RecoveryAction.DRAIN_AND_RESTART,
        confidence=0.9, culprit_hosts=["gpu-2"], evidence=[silence("gpu-2")],
    )  # fmt: skip
    for node in (
        NodeInfo(name="gpu-2", state="DOWN"),
        NodeInfo(name="gpu-2", state="ALLOCATED", flags=["NOT_RESPONDING"]),
    ):
        plan = decision_for(quiet, JOB, POLICY, charged_restarts=0, nodes=[node])
        assert plan.drain_nodes == ["gpu-2"], node
