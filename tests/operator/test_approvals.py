"""When a recovery asks a person (resurrect.operator.approvals.approval_needed)."""

from __future__ import annotations

from resurrect.config import ApprovalSettings
from resurrect.contracts import JobInfo, JobState, RecoveryAction, RecoveryDecision
from resurrect.operator.approvals import approval_needed, plan_approval_needed, timeout_default
from resurrect.plans.models import ApprovalSpec, ResolvedPlan, ResolvedStep, RetrySpec, WhenSpec

JOB = JobInfo(job_id="7", state=JobState.RUNNING, nodes=["a", "b", "c", "d"], num_nodes=4)


def step(activity: str, **extra: object) -> ResolvedStep:
    return ResolvedStep.model_validate(
        {
            "activity": activity,
            "timeout_s": 60,
            "retry": RetrySpec(),
            "deadline_s": 60,
            "on_failure": "stop",
            "from_plan": "p",
            **extra,
        }
    )


def draft(**extra: object) -> RecoveryDecision:
    return RecoveryDecision.model_validate({"action": RecoveryAction.DRAIN_AND_RESTART, **extra})


def test_nothing_asks_by_default() -> None:
    settings = ApprovalSettings()
    for name in ("recovery.drain_nodes", "recovery.requeue_job", "recovery.notify"):
        assert approval_needed(step(name), draft(drain_nodes=["a"]), JOB, settings) is None


def test_marked_and_risky_steps_ask() -> None:
    settings = ApprovalSettings()
    assert "requires approval" in str(
        approval_needed(step("x.y", requires_approval=True), draft(), JOB, settings)
    )
    assert "risky" in str(approval_needed(step("x.y", risky=True), draft(), JOB, settings))
    off = ApprovalSettings(risky_steps=False)
    assert approval_needed(step("x.y", risky=True), draft(), JOB, off) is None


def test_drains_beyond_the_threshold_ask() -> None:
    settings = ApprovalSettings(drain_nodes_over=1)
    drain = step("recovery.drain_nodes")
    assert approval_needed(drain, draft(drain_nodes=["a"]), JOB, settings) is None
    why = approval_needed(drain, draft(drain_nodes=["a", "b"]), JOB, settings)
    assert why is not None and "drain of 2 nodes" in why


def test_stopping_a_big_running_job_asks() -> None:
    settings = ApprovalSettings(stop_job_nodes_over=2)
    requeue = step("recovery.requeue_job")
    why = approval_needed(requeue, draft(), JOB, settings)
    assert why is not None and "on 4 nodes" in why
    ended = JOB.model_copy(update={"state": JobState.NODE_FAIL})  # nothing running to stop
    assert approval_needed(requeue, draft(), ended, settings) is None


def test_plan_approval_and_its_timeout_default() -> None:
    plan = ResolvedPlan(
        name="gated",
        source="x",
        when=WhenSpec(),
        counts_against_budget=None,
        steps=[],
        approval=ApprovalSpec(timeout_s=30, on_timeout="approve"),
    )
    assert plan_approval_needed(plan) == "plan 'gated' requires approval"
    assert timeout_default(plan, ApprovalSettings()) == (30, "approve")
    bare = plan.model_copy(update={"approval": None})
    assert plan_approval_needed(bare) is None
    assert timeout_default(bare, ApprovalSettings(timeout_s=9)) == (9, "deny")
