"""``recovery.assess`` records in the recovery's history only the plans its decision looks up
(and the quick steps among theirs), not every plan the worker has: the workflow's decision
over them is the same (tests/plans/test_plans_looked_up.py), and the assessment, the largest
record of a recovery, stays small however many plans a site writes."""

from __future__ import annotations

import os
from pathlib import Path

from resurrect.activities.recovery import RecoveryActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts import JobPolicy, JobState
from resurrect.contracts.assessment import AssessRequest
from resurrect.plans.decide import decide, decide_assessed
from resurrect.plans.loader import load_plans
from resurrect.rules.engine import default_engine
from resurrect.testing import FakeScheduler
from resurrect.testing.steps import make_step_input

QUICK = ["recovery.notify", "recovery.verify_checkpoint", "recovery.wait_running"]


def crashed_with(tmp_path: Path, line: str) -> AssessRequest:
    log = tmp_path / "train.out"
    log.write_text(f"Traceback (most recent call last):\n{line}\n")
    bundle = make_step_input("recovery.assess").bundle
    job = bundle.job.model_copy(
        update={"stdout_path": str(log), "user_id": os.getuid(), "state": JobState.FAILED}
    )
    bundle = bundle.model_copy(update={"job": job, "policy": JobPolicy()})
    return AssessRequest(bundle=bundle, workflow_id="recover/test/42/0")


async def test_an_application_error_carries_the_stop_plan_alone(tmp_path: Path) -> None:
    every = load_plans()
    activities = RecoveryActivities(
        FakeScheduler(cluster_name="test"),
        ResurrectConfig(),
        default_engine(),
        plans=every,
        quick_steps=QUICK,
    )
    request = crashed_with(tmp_path, "KeyError: 'labels'")
    assessment = await activities.assess(request)
    assert [p.name for p in assessment.plans] == ["stop-and-notify"] and len(every) > 1
    assert assessment.quick_steps == ["recovery.notify"]  # the one step of that plan
    everything = decide(request.bundle, assessment.diagnosis, every, 0, reported=[])
    carried = decide_assessed(request.bundle, assessment, request.reported)  # the workflow's
    assert (carried.decision, carried.plan) == (everything.decision, everything.plan)
