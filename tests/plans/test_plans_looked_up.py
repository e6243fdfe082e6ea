"""A recovery's assessment carries only the plans its decision looks up
(``plans_looked_up``): the workflow's ``decide`` over them must make the same choice as over
every plan the worker has, whatever the diagnosis, budget and plan rules."""

from __future__ import annotations

import itertools

import pytest
from support.decisions import diagnosis_of

from resurrect.contracts import (
    FaultClass,
    JobInfo,
    JobPolicy,
    JobState,
    RecoveryAction,
    RecoveryContext,
    SignalKind,
)
from resurrect.plans.decide import decide, plans_looked_up
from resurrect.plans.loader import load_plans
from resurrect.plans.models import ResolvedPlan, WhenSpec
from resurrect.testing.steps import make_step_input

JOB = JobInfo(job_id="1", state=JobState.FAILED, nodes=["gpu-1", "gpu-2"], partition="batch")
RESTARTS = [RecoveryAction.RESTART, RecoveryAction.DRAIN_AND_RESTART]


def plan(name: str, counts: bool | None = None, **when: object) -> ResolvedPlan:
    return ResolvedPlan(
        name=name,
        source="test",
        when=WhenSpec.model_validate(when),
        counts_against_budget=counts,
        steps=[],
    )


def context(max_restarts: int) -> RecoveryContext:
    incident = make_step_input("recovery.requeue", job=JOB).bundle
    return incident.model_copy(update={"policy": JobPolicy(max_restarts=max_restarts)})


PLAN_SETS = {
    "default": load_plans(),
    "overrides": [
        plan("gpu-charged", counts=True, fault_classes=["gpu.hardware"], actions=RESTARTS),
        plan("free-crash", counts=False, fault_classes=["process.crash"]),
        plan("sure", min_confidence=0.8),
        plan("culprits", culprit_nodes="some", actions=RESTARTS),
        plan("other-partition", partitions=["debug"]),
        plan("observe-only", modes=["observe"]),
        plan("stop", actions=["stop"]),
        plan("any-restart", actions=RESTARTS),
    ],
    "no-stop-plan": [plan("charged", counts=True, actions=RESTARTS)],
    "catch-all-first": [plan("all"), *load_plans()],
}
CASES = list(
    itertools.product(
        PLAN_SETS,
        [
            FaultClass.GPU_HARDWARE,
            FaultClass.NODE_LOST,
            FaultClass.PROCESS_CRASH,
            FaultClass.APP_ERROR,
            FaultClass.JOB_CANCELLED,
        ],
        [[], ["gpu-2"]],
        [SignalKind.KERNEL_LOG, SignalKind.JOB_LOG],
        [0, 1, 2],
    )
)


@pytest.mark.parametrize(("plans", "fault", "hosts", "kind", "charged"), CASES)
def test_the_plans_looked_up_make_the_same_choice_as_every_plan(
    plans: str, fault: FaultClass, hosts: list[str], kind: SignalKind, charged: int
) -> None:
    bundle, found = context(max_restarts=2), diagnosis_of(fault, hosts, kind=kind, confidence=0.7)
    every = PLAN_SETS[plans]
    choice = decide(bundle, found, every, charged)
    kept = plans_looked_up(every, choice)
    again = decide(bundle, found, kept, charged)
    assert (again.decision, again.plan, again.notes) == (choice.decision, choice.plan, choice.notes)
    assert len(kept) <= 2 and kept == [p for p in every if p in kept]  # in match order


def test_a_plan_charging_over_budget_keeps_both_plans_it_looked_up() -> None:
    charged = plan("charged", counts=True, actions=RESTARTS)
    stop = plan("stop", actions=["stop"])
    every = [plan("unused", actions=["none"]), charged, stop]
    gpu = diagnosis_of(FaultClass.GPU_HARDWARE, ["gpu-2"], confidence=0.7)
    choice = decide(context(max_restarts=2), gpu, every, charged_restarts=2)
    assert choice.plan is stop
    assert plans_looked_up(every, choice) == [charged, stop]


def test_a_node_loss_under_the_default_plans_carries_one_plan() -> None:
    every = load_plans()
    lost = diagnosis_of(
        FaultClass.NODE_LOST, ["gpu-2"], kind=SignalKind.SCHEDULER_STATE, confidence=0.7
    )
    choice = decide(context(max_restarts=2), lost, every, 0)
    assert [p.name for p in plans_looked_up(every, choice)] == [choice.plan and choice.plan.name]
    assert len(every) > 1


def test_no_plan_matching_carries_none() -> None:
    every = [plan("restarts", actions=RESTARTS)]
    app = diagnosis_of(FaultClass.APP_ERROR, [], kind=SignalKind.JOB_LOG, confidence=0.7)
    choice = decide(context(max_restarts=2), app, every, 0)
    assert choice.plan is None and plans_looked_up(every, choice) == []
