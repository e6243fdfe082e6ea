"""Recoveries recorded before the telemetry interceptor existed replay with it: activity
summaries and current details are metadata, not commands replay compares, so recoveries in
flight during an upgrade keep going."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from resurrect.telemetry.interceptor import TelemetryInterceptor
from resurrect.workflows.recovery import RecoveryWorkflow

HISTORIES = Path(__file__).parent.parent / "fixtures" / "histories" / "RecoveryWorkflow"


async def test_stored_histories_replay_with_the_interceptor() -> None:
    replayer = Replayer(
        workflows=[RecoveryWorkflow],
        interceptors=[TelemetryInterceptor()],
        data_converter=pydantic_data_converter,
    )
    stored = sorted(HISTORIES.glob("*.json"))
    assert len(stored) >= 3
    for path in stored:
        history = WorkflowHistory.from_json(path.stem, path.read_text())
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, (path.name, result.replay_failure)
