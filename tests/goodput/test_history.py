"""Recoveries read from real recorded Temporal histories (tests/fixtures/histories)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from resurrect.goodput.history import recoveries_query, recovery_from_history

HISTORIES = Path(__file__).parent.parent / "fixtures" / "histories" / "RecoveryWorkflow"


def load(name: str, workflow_id: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(workflow_id, (HISTORIES / name).read_text())


def test_a_node_loss_history_gives_its_phase_times_and_outcome() -> None:
    history = load("node-loss.json", "recover/test/1/0")
    record = recovery_from_history(history, pydantic_data_converter.payload_converter)
    events = list(history.events)
    assert record.started_at == events[0].event_time.ToDatetime(tzinfo=UTC)
    assert record.fault_class == "node.lost" and record.outcome == "recovered"
    assert record.drained_nodes == ["node3"]
    assert record.first_observed_at is not None and record.first_observed_at <= record.started_at
    assert record.started_at < record.requeued_at < record.running_again_at < record.closed_at  # type: ignore[operator]
    assert record.attempt == 0 and record.job_id


def test_a_stopped_recovery_never_requeued() -> None:
    record = recovery_from_history(
        load("app-error-stop.json", "recover/test/2/0"), pydantic_data_converter.payload_converter
    )
    assert record.requeued_at is None and record.running_again_at is None
    assert record.outcome is not None and record.outcome != "recovered"


def test_the_query_filters_by_job_cluster_and_start_time() -> None:
    query = recoveries_query("12", datetime(2026, 11, 30, 6, 0, tzinfo=UTC), "c1")
    assert query == (
        "WorkflowType = 'RecoveryWorkflow' AND ResurrectJobId = '12'"
        " AND ResurrectCluster = 'c1' AND StartTime >= '2026-11-30T06:00:00Z'"
    )
