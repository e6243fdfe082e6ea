"""Recoveries read from real recorded Temporal histories (tests/fixtures/histories)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from resurrect.contracts import RecoveryContext
from resurrect.goodput.history import recoveries_query, recovery_from_history
from resurrect.temporal.history import local_activity

HISTORIES = Path(__file__).parent.parent / "fixtures" / "histories" / "RecoveryWorkflow"


def load(name: str, workflow_id: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(workflow_id, (HISTORIES / name).read_text())


# a node loss is one workflow task: each step's time is when its local activity finished,
# not when the task completed
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
    assert record.fault_class == "app.error"


def test_the_query_filters_by_job_cluster_and_start_time() -> None:
    query = recoveries_query("12", datetime(2026, 11, 30, 6, 0, tzinfo=UTC), "c1")
    assert query == (
        "WorkflowType = 'RecoveryWorkflow' AND ResurrectJobId = '12'"
        " AND ResurrectCluster = 'c1' AND StartTime >= '2026-11-30T06:00:00Z'"
    )


def test_the_evidence_gathered_locally_is_read_from_its_marker() -> None:
    """The evidence is a local activity (a marker, not an activity task): the start and
    submit times of the interrupted attempt come from it."""
    history = load("node-loss.json", "recover/test/1/0")
    converter = pydantic_data_converter.payload_converter
    found = [local for e in history.events if (local := local_activity(e)) is not None]
    assert found[0][0] == "recovery.gather_evidence"
    [bundle] = converter.from_payloads(found[0][1].payloads, [RecoveryContext])
    assert bundle.job.job_id == "108"
    started = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    bundle.job.start_time, bundle.job.submit_time = started, started - timedelta(minutes=5)
    found[0][1].payloads[0].CopyFrom(converter.to_payloads([bundle])[0])
    record = recovery_from_history(history, converter)
    assert record.interrupted_attempt_started_at == started
    assert record.job_submitted_at == started - timedelta(minutes=5)


def test_a_local_activity_is_timed_by_its_own_completion() -> None:
    history = load("node-loss.json", "recover/test/1/0")
    found = [local for e in history.events if (local := local_activity(e)) is not None]
    assert [f.name for f in found][-2:] == ["recovery.requeue_job", "recovery.wait_running"]
    [task_completed] = [
        e for e in history.events if e.HasField("workflow_task_completed_event_attributes")
    ]
    times = [f.completed_at for f in found]
    assert all(t is not None for t in times)
    assert times == sorted(times)  # type: ignore[type-var]
    assert times[-1] <= task_completed.event_time.ToDatetime(tzinfo=UTC)  # type: ignore[operator]
