"""Replay of stored workflow histories: no server, no worker, just today's workflow code.

A stored history (tests/support/histories.py says how they are recorded) is what an
earlier version of the code did; if today's code would issue different commands for it,
a workflow in flight during an upgrade would fail with a non-determinism error.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from support.histories import load, stored, workflow_type
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from resurrect.contracts import StepInput
from resurrect.contracts.workflow_names import Activity
from resurrect.workflows.drain_budget import DrainBudgetWorkflow
from resurrect.workflows.node_health import NodeHealthWorkflow
from resurrect.workflows.node_repair import NodeRepairWorkflow
from resurrect.workflows.recovery import RecoveryWorkflow
from resurrect.workflows.stack_probe import StackProbeWorkflow

WORKFLOWS: dict[str, type] = {
    "RecoveryWorkflow": RecoveryWorkflow,
    "NodeHealthWorkflow": NodeHealthWorkflow,
    "StackProbeWorkflow": StackProbeWorkflow,
    "NodeRepairWorkflow": NodeRepairWorkflow,
    "DrainBudgetWorkflow": DrainBudgetWorkflow,
}


def replayer() -> Replayer:
    return Replayer(workflows=list(WORKFLOWS.values()), data_converter=pydantic_data_converter)


def test_every_workflow_has_stored_histories() -> None:
    kinds = {path.parent.name for path in stored()}
    assert kinds == set(WORKFLOWS)
    assert len([p for p in stored() if p.parent.name == "RecoveryWorkflow"]) >= 3


@pytest.mark.parametrize("path", stored(), ids=lambda p: f"{p.parent.name}/{p.stem}")
async def test_stored_history_replays_without_nondeterminism(path: Path) -> None:
    history = load(path)
    assert workflow_type(history) == path.parent.name
    await replayer().replay_workflow(history)  # raises on any replay failure


def _with_activity_renamed(history_json: str, old: str, new: str) -> WorkflowHistory:
    """The history as a workflow that called activity ``new`` where ours calls ``old``."""
    data = json.loads(history_json)
    renamed = 0
    for event in data["events"]:
        scheduled = event.get("activityTaskScheduledEventAttributes")
        if scheduled and scheduled["activityType"]["name"] == old:
            scheduled["activityType"]["name"] = new
            renamed += 1
    assert renamed == 1, f"{old} scheduled {renamed} times"
    return WorkflowHistory.from_json("renamed-activity", json.dumps(data))


async def test_a_history_of_different_workflow_code_fails_as_nondeterministic() -> None:
    source = next(p for p in stored() if p.name == "wait-as-task.json")
    activity = "recovery.wait_running"
    history = _with_activity_renamed(source.read_text(), activity, f"{activity}_v0")
    with pytest.raises(NondeterminismError, match=rf"{activity}_v0"):
        await replayer().replay_workflow(history)


def _stored_step_inputs() -> list[dict[str, Any]]:
    """The inputs of every plan step scheduled as an activity task in the stored recovery
    histories."""
    inputs: list[dict[str, Any]] = []
    for path in (p for p in stored() if p.parent.name == "RecoveryWorkflow"):
        for event in json.loads(path.read_text())["events"]:
            scheduled = event.get("activityTaskScheduledEventAttributes")
            if scheduled and scheduled["activityType"]["name"] != Activity.ASSESS:
                payload = scheduled["input"]["payloads"][0]["data"]
                inputs.append(json.loads(base64.b64decode(payload)))
    return inputs


def test_a_step_scheduled_by_a_worker_of_this_release_still_reads() -> None:
    # activity inputs are not compared on replay, so replay alone says nothing about them
    inputs = _stored_step_inputs()
    assert inputs
    for data in inputs:
        step = StepInput.model_validate(data)
        assert step.decision.action is not None
    with pytest.raises(ValidationError, match="bogus"):  # contracts refuse unknown fields
        StepInput.model_validate({**inputs[0], "bogus": 1})
