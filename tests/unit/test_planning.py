from __future__ import annotations

from resurrect.contracts import (
    DEFAULT_ACTION,
    Diagnosis,
    FaultClass,
    JobInfo,
    JobPolicy,
    JobState,
    RecoveryAction,
)
from resurrect.planning import match_job_nodes, plan_recovery

JOB = JobInfo(job_id="1", state=JobState.FAILED, nodes=["gpu-1", "gpu-2"], excluded_nodes=["gpu-9"])
POLICY = JobPolicy(max_restarts=2)


def diag(fault: FaultClass, hosts: list[str] | None = None) -> Diagnosis:
    return Diagnosis(
        fault_class=fault, action=DEFAULT_ACTION[fault], confidence=0.9, culprit_hosts=hosts or []
    )


def test_gpu_fault_drains_the_culprit_and_keeps_earlier_exclusions() -> None:
    plan = plan_recovery(
        diag(FaultClass.GPU_HARDWARE, ["gpu-2.cluster.local"]), JOB, POLICY, charged_restarts=9
    )
    assert plan.action is RecoveryAction.DRAIN_AND_RESTART
    assert plan.drain_nodes == ["gpu-2"]
    assert plan.exclude_nodes == ["gpu-9", "gpu-2"]
    assert plan.requeue and not plan.counts_against_budget  # infra: free even over budget


def test_hosts_the_job_did_not_use_are_never_drained() -> None:
    plan = plan_recovery(diag(FaultClass.NODE_LOST, ["login-1"]), JOB, POLICY, charged_restarts=0)
    assert plan.drain_nodes == [] and plan.action is RecoveryAction.RESTART
    assert any("login-1" in r for r in plan.reasons)


def test_application_faults_stop() -> None:
    for fault in (FaultClass.APP_ERROR, FaultClass.MEMORY_DEVICE_OOM, FaultClass.MEMORY_HOST_OOM):
        plan = plan_recovery(diag(fault), JOB, POLICY, charged_restarts=0)
        assert plan.action is RecoveryAction.STOP and not plan.requeue and not plan.drain_nodes


def test_cancelled_job_is_left_alone() -> None:
    plan = plan_recovery(diag(FaultClass.JOB_CANCELLED), JOB, POLICY, charged_restarts=0)
    assert plan.action is RecoveryAction.NONE and not plan.requeue


def test_budget_counts_only_for_non_infrastructure_faults() -> None:
    within = plan_recovery(diag(FaultClass.PROCESS_CRASH), JOB, POLICY, charged_restarts=1)
    assert within.requeue and within.counts_against_budget
    spent = plan_recovery(diag(FaultClass.PROCESS_CRASH), JOB, POLICY, charged_restarts=2)
    assert spent.action is RecoveryAction.STOP and not spent.requeue
    assert any("budget spent" in r for r in spent.reasons)


def test_a_running_job_is_requeued_like_an_ended_one() -> None:
    """No separate cancel: requeueing a running job ends its attempt (tests/scheduler/
    test_verified.py shows the requeue-hold doing it)."""
    running = JOB.model_copy(update={"state": JobState.RUNNING})
    plan = plan_recovery(
        diag(FaultClass.GPU_HARDWARE, ["gpu-1"]), running, POLICY, charged_restarts=0
    )
    ended = plan_recovery(diag(FaultClass.GPU_HARDWARE, ["gpu-1"]), JOB, POLICY, charged_restarts=0)
    assert plan == ended
    assert (
        plan.requeue and plan.drain_nodes == ["gpu-1"] and plan.exclude_nodes == ["gpu-9", "gpu-1"]
    )


def test_match_job_nodes_by_short_name() -> None:
    assert match_job_nodes(["GPU-1.x", "gpu-3"], ["gpu-1", "gpu-2"]) == (["gpu-1"], ["gpu-3"])
