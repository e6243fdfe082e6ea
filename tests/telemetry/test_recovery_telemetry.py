"""What a recovery records from the worker's side, on the real Temporal dev server (fake
scheduler): metrics by fault class and outcome, one trace from the sensor's span through
every activity, the trace id and the outcome sentence in the notes, summaries in the UI."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.builders import interruption, job, make_config, opt_in
from support.telemetry import shared_telemetry
from support.workers import resurrect_workers
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.converter import PayloadConverter

from resurrect.contracts import Evidence, FaultClass, RecoveryOutcome, SignalKind
from resurrect.sensors.report import report_interruption
from resurrect.telemetry.tracing import with_tracing
from resurrect.testing import FakeScheduler

pytestmark = pytest.mark.temporal


def labels_of(point: object) -> dict[str, str]:
    return dict(point.attributes)  # type: ignore[attr-defined]


async def test_a_node_loss_recovery_is_measured_traced_and_summarised(
    temporal_client: Client, tmp_path: Path
) -> None:
    telemetry = shared_telemetry()
    config = make_config(
        tmp_path, mode="act", recovery={"wait_running_timeout_s": 20, "activity_timeout_s": 20}
    )
    cluster = config.cluster.name
    scheduler = FakeScheduler.with_nodes(4, cluster_name=cluster)
    scheduler.nodes["node2"] = scheduler.nodes["node2"].model_copy(
        update={"state": "DOWN", "flags": ["NOT_RESPONDING"]}
    )
    scheduler.jobs["100"] = job("100", comment=opt_in(max_restarts=2))
    seen = datetime.now(UTC) - timedelta(seconds=2)
    report = interruption(
        cluster,
        scheduler.jobs["100"],
        source="slurm_watcher",
        reason="node node2 DOWN",
        fault_hint=FaultClass.NODE_LOST,
        evidence=[Evidence(kind=SignalKind.SCHEDULER_STATE, text="node2 DOWN", observed_at=seen)],
    )
    client = with_tracing(temporal_client, config.telemetry)
    async with resurrect_workers(client, config, scheduler):
        workflow_id = await report_interruption(
            client, report, task_queue=config.temporal.task_queue
        )
        handle = client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)
        outcome: RecoveryOutcome = await asyncio.wait_for(handle.result(), timeout=60)
        details = await handle.query("__temporal_workflow_metadata")
        static_summary = await (await handle.describe()).static_summary()
        history = await handle.fetch_history()
    assert outcome.recovered, outcome.notes

    # the Temporal UI: the static summary, current details and a summary per activity
    assert static_summary is not None
    assert static_summary.startswith("node.lost of job 100 on node1, node2")
    sentence = re.compile(
        r"node\.lost on node2 \(job 100\): drained node2, requeued, running again in \d+\.\d s"
    )
    assert sentence.fullmatch(details.current_details), details
    assert any(sentence.fullmatch(n.removeprefix("summary: ")) for n in outcome.notes)
    converter = PayloadConverter.default
    summaries = [  # activity tasks, and local activities (markers)
        converter.from_payloads([e.user_metadata.summary])[0]
        for e in history.events
        if e.event_type
        in (EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, EventType.EVENT_TYPE_MARKER_RECORDED)
        and e.user_metadata.HasField("summary")
    ]
    assert summaries[:2] == [
        "gather evidence on job 100",
        "attribute the fault of job 100, count its charged restarts",
    ]
    assert "drain node2" in summaries
    assert "requeue job 100 excluding node2" in summaries

    # one trace: the sensor's span, the workflow, every activity; its id in the notes
    (trace_note,) = [n for n in outcome.notes if n.startswith("trace ")]
    trace_id = trace_note.removeprefix("trace ")
    spans = [
        s for s in telemetry.spans.get_finished_spans() if f"{s.context.trace_id:032x}" == trace_id
    ]
    names = {s.name for s in spans}
    assert "report node.lost" in names
    assert "RunActivity:recovery.drain_nodes" in names
    assert "RunActivity:recovery.wait_running" in names

    # metrics, recorded once from the worker's side
    recoveries = [
        p
        for p in telemetry.points("resurrect_recoveries")
        if labels_of(p).get("cluster") == cluster
    ]
    assert [
        (labels_of(p)["fault_class"], labels_of(p)["outcome"], p.value) for p in recoveries
    ] == [("node.lost", "recovered", 1)]
    detect = [
        p
        for p in telemetry.points("resurrect_time_to_detect_seconds")
        if labels_of(p).get("cluster") == cluster
    ]
    assert detect and detect[0].count == 1 and detect[0].sum >= 2.0  # from the evidence's time
    drained = [
        p
        for p in telemetry.points("resurrect_nodes_drained")
        if labels_of(p).get("cluster") == cluster
    ]
    assert drained[0].value == 1
    steps = {labels_of(p)["activity"] for p in telemetry.points("resurrect_step_duration_seconds")}
    assert {"recovery.gather_evidence", "recovery.drain_nodes", "recovery.requeue_job"} <= steps
    budget = [
        p
        for p in telemetry.points("resurrect_restart_budget_used")
        if labels_of(p).get("cluster") == cluster
    ]
    assert budget and budget[0].value == 0
    lag = [p for p in telemetry.points("resurrect_sensor_lag_seconds")]
    assert any(labels_of(p)["source"] == "slurm_watcher" and p.sum >= 2.0 for p in lag)
