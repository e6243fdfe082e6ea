from __future__ import annotations

from pathlib import Path

import pytest

from resurrect.activities.steps import builtin_steps
from resurrect.contracts import (
    DEFAULT_ACTION,
    Diagnosis,
    FaultClass,
    JobInfo,
    JobState,
    RecoveryAction,
)
from resurrect.errors import PlanError
from resurrect.plans.decide import select_plan
from resurrect.plans.loader import SHIPPED_PLANS, check_plans, load_plans
from resurrect.steps.plugins import params_registry

REGISTRY = params_registry(builtin_steps())
JOB = JobInfo(job_id="1", state=JobState.FAILED, partition="gpu")


def write(tmp_path: Path, text: str, name: str = "plans.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_plans_load_and_check_against_builtin_steps() -> None:
    plans = load_plans()
    check_plans(plans, REGISTRY)
    assert [p.name for p in plans][:4] == [
        "stop-and-notify",
        "leave-alone",
        "drain-and-restart",
        "restart-from-checkpoint",
    ]
    drain = next(p for p in plans if p.name == "drain-and-restart")
    assert [s.activity for s in drain.steps] == [
        "recovery.drain_nodes",
        "recovery.verify_checkpoint",
        "recovery.requeue_job",
        "recovery.wait_running",
    ]
    assert all(p.source == str(SHIPPED_PLANS) for p in plans)


@pytest.mark.parametrize(
    ("fault", "plan"),
    [
        (FaultClass.GPU_HARDWARE, "drain-and-restart"),
        (FaultClass.APP_ERROR, "stop-and-notify"),
        (FaultClass.JOB_CANCELLED, "leave-alone"),
        (FaultClass.PROCESS_CRASH, "restart-from-checkpoint"),
    ],
)
def test_first_match_by_action(fault: FaultClass, plan: str) -> None:
    diagnosis = Diagnosis(
        fault_class=fault, action=DEFAULT_ACTION[fault], confidence=0.9, culprit_hosts=["n1"]
    )
    chosen = select_plan(load_plans(), diagnosis, DEFAULT_ACTION[fault], JOB, "act")
    assert chosen is not None and chosen.name == plan


def test_user_plans_match_first_and_replace_shipped_names(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
plans:
  - name: canary-gpu
    when: {fault_classes: [gpu.hardware], partitions: [gpu], min_confidence: 0.8}
    counts_against_budget: false
    steps:
      - activity: recovery.drain_nodes
      - activity: recovery.notify
        params: {severity: info}
  - name: stop-and-notify
    when: {actions: [stop]}
    steps:
      - activity: recovery.notify
        params: {severity: warning}
""",
    )
    plans = load_plans([path])
    names = [p.name for p in plans]
    assert names[0] == "canary-gpu" and names.count("stop-and-notify") == 1
    diagnosis = Diagnosis(
        fault_class=FaultClass.GPU_HARDWARE, action=RecoveryAction.DRAIN_AND_RESTART, confidence=0.9
    )
    assert select_plan(plans, diagnosis, diagnosis.action, JOB, "act").name == "canary-gpu"  # type: ignore[union-attr]
    low = diagnosis.model_copy(update={"confidence": 0.5})
    assert select_plan(plans, low, low.action, JOB, "act").name == "drain-and-restart"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("plans: [{name: x, steps: [{activity: recovery.notify, retries: 3}]}]", "retries"),
        ("plans: [{name: x, steps: []}]", "plan 'x' has no steps"),
        ("plans: [{name: x, steps: [{activity: recovery.notify, use: y}]}]", "exactly one"),
        (
            "plans: [{name: a, steps: [{use: b}]}, {name: b, steps: [{use: a}]}]",
            "cycle a -> b -> a",
        ),
        ("plans: [{name: a, steps: [{use: nowhere}]}]", "unknown plan 'nowhere'"),
        ("plans: [{name: Bad Name, steps: [{activity: recovery.notify}]}]", "name"),
        (
            "plans: [{name: x, when: {fault_classes: [gpu.melted]}, steps: [{activity: recovery.notify}]}]",
            "plan 'x'",
        ),
        ("version: 2\nplans: []", "version"),
        ("plans: {name: x}", "plans"),
        ("plans: [unclosed", "not valid YAML"),
    ],
)
def test_malformed_plan_files_name_the_file_and_plan(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PlanError) as err:
        load_plans([path], include_shipped=False)
    assert str(path) in str(err.value) and message in str(err.value)


def test_unregistered_activity_and_bad_params_are_rejected(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
plans:
  - name: needs-bmc
    steps:
      - activity: bmc.reset_gpu
      - activity: recovery.notify
        params: {severity: loud}
      - activity: recovery.drain_nodes
        params: {force: true}
""",
    )
    with pytest.raises(PlanError) as err:
        check_plans(load_plans([path]), REGISTRY)
    text = str(err.value)
    assert (
        "plan 'needs-bmc' step 1 (bmc.reset_gpu): no worker registers activity 'bmc.reset_gpu'"
        in text
    )
    assert "step 2 (recovery.notify): invalid params" in text
    assert "step 3 (recovery.drain_nodes): takes no params" in text


def test_duplicate_plan_names_across_user_files(tmp_path: Path) -> None:
    one = write(tmp_path, "plans: [{name: x, steps: [{activity: recovery.notify}]}]", "a.yaml")
    two = write(tmp_path, "plans: [{name: x, steps: [{activity: recovery.notify}]}]", "b.yaml")
    with pytest.raises(PlanError, match="also defined in"):
        load_plans([one, two])


def test_plugin_plans_come_after_user_plans_and_can_be_replaced(tmp_path: Path) -> None:
    plugin_file = write(
        tmp_path, "plans: [{name: tell, steps: [{activity: recovery.notify}]}]", "plugin.yaml"
    )
    user_file = write(
        tmp_path,
        "plans: [{name: tell, steps: [{activity: recovery.notify, params: {severity: info}}]}]",
        "user.yaml",
    )
    plans = load_plans([user_file], defaults=[plugin_file])
    tell = [p for p in plans if p.name == "tell"]
    assert len(tell) == 1 and tell[0].source == str(user_file)
    only_plugin = load_plans([], defaults=[plugin_file])
    assert only_plugin[0].name == "tell" and only_plugin[0].source == str(plugin_file)
