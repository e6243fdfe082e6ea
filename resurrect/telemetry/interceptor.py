"""The worker's telemetry interceptor: recovery metrics and Temporal UI sentences.

Workflow code may not emit metrics (it is replayed, and the sandbox forbids side effects),
so this interceptor records them from the worker's side:

* activities (not sandboxed): the duration and result of every recovery activity, the
  restarts already charged to the job's budget, and a diagnosis of ``unknown`` by the shape of
  its first fatal-looking line;
* the recovery workflow's end, once, never during replay: the recovery by fault class and
  outcome, time to detect, time to recover, nodes drained. The outcome it reads is the
  workflow's own result, so metrics and history agree.

It also makes the Temporal UI read as sentences: a summary on every activity it schedules
and the workflow's current details ("node.lost on node2: drained node2, requeued, running
again in 3.4 s"), all deterministic functions of the workflow's inputs and results. The trace
id (from the tracing header a sensor's span started) is added to the recovery's notes.
"""

from __future__ import annotations

import time
from typing import Any

from temporalio import activity, workflow
from temporalio.converter import PayloadConverter
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from resurrect.contracts import Interruption, RecoveryOutcome
from resurrect.contracts.assessment import Assessment, AssessRequest
from resurrect.rules.unrecognised import unknown_shape
from resurrect.telemetry import metrics as m
from resurrect.telemetry.record import earliest_evidence, record_unknown_diagnosis
from resurrect.telemetry.summary import activity_summary, outcome_sentence

RECOVERY_WORKFLOW = "RecoveryWorkflow"
ASSESS = "recovery.assess"  # the charged restarts come with the diagnosis
TRACE_HEADER = "_tracer-data"  # where temporalio.contrib.opentelemetry carries the context


def trace_id_from_headers(headers: Any) -> str | None:
    """The W3C trace id in the tracing header, or None."""
    payload = headers.get(TRACE_HEADER) if headers else None
    if payload is None:
        return None
    try:
        carrier = PayloadConverter.default.from_payloads([payload])[0]
    except Exception:  # not ours to judge: no trace id then
        return None
    parent = carrier.get("traceparent") if isinstance(carrier, dict) else None
    parts = parent.split("-") if isinstance(parent, str) else []
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def record_recovery(
    outcome: RecoveryOutcome | None,
    interruption: Interruption | None,
    started: float,
    finished: float,
    *,
    failed: bool = False,
) -> None:
    """The metrics of one finished recovery (outside the sandbox, never on replay)."""
    fault = outcome.fault_class.value if outcome else "unknown"
    cluster = outcome.cluster if outcome else (interruption.cluster if interruption else "")
    labels = {
        "cluster": cluster,
        "fault_class": fault,
        "outcome": "workflow_failed" if failed or outcome is None else outcome.outcome,
        "mode": outcome.mode if outcome else "unknown",
    }
    m.RECOVERIES.add(1, labels)
    m.TIME_TO_RECOVER.record(max(0.0, finished - started), labels)
    if interruption is not None:
        m.TIME_TO_DETECT.record(
            max(0.0, started - earliest_evidence(interruption)),
            {"cluster": cluster, "fault_class": fault, "source": interruption.source},
        )
    if outcome is not None and outcome.mode == "act" and outcome.drained_nodes:
        m.NODES_DRAINED.add(len(outcome.drained_nodes), {"cluster": cluster, "fault_class": fault})


class _ActivityInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        name = activity.info().activity_type
        start = time.monotonic()
        result_label = "error"
        try:
            result = await super().execute_activity(input)
            ok = getattr(result, "ok", True)
            result_label = "ok" if ok else "not_ok"
        finally:
            m.STEP_DURATION.record(
                time.monotonic() - start, {"activity": name, "result": result_label}
            )
        request = input.args[0] if input.args else None
        if name == ASSESS and isinstance(result, Assessment):
            if isinstance(request, AssessRequest):
                report = request.bundle.interruption
                m.RESTARTS_CHARGED.set(
                    result.charged_restarts, {"cluster": report.cluster, "job_id": report.job_id}
                )
                shape = unknown_shape(result.diagnosis)
                if shape is not None:
                    record_unknown_diagnosis(report.cluster, shape)
        return result


class _WorkflowOutbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        _summarise(input)
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        _summarise(input)
        return super().start_local_activity(input)


def _summarise(input: StartActivityInput | StartLocalActivityInput) -> None:
    """A recovery's activity (task or local) gets its sentence, the workflow its details."""
    if workflow.info().workflow_type == RECOVERY_WORKFLOW:
        text = activity_summary(input.activity, list(input.args))
        if input.summary is None:
            input.summary = text
        workflow.set_current_details(f"running: {text}")


class _WorkflowInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_WorkflowOutbound(outbound))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        info = workflow.info()
        if info.workflow_type != RECOVERY_WORKFLOW:
            return await super().execute_workflow(input)
        interruption = input.args[0] if input.args else None
        if not isinstance(interruption, Interruption):
            interruption = None
        started = info.start_time.timestamp()
        try:
            result = await super().execute_workflow(input)
        except BaseException:
            if not workflow.unsafe.is_replaying():
                with workflow.unsafe.sandbox_unrestricted():
                    record_recovery(
                        None, interruption, started, workflow.now().timestamp(), failed=True
                    )
            raise
        if isinstance(result, RecoveryOutcome):
            trace_id = trace_id_from_headers(info.headers)
            if trace_id is not None:
                result.notes.append(f"trace {trace_id}")
            finished = workflow.now().timestamp()
            sentence = outcome_sentence(result, finished - started, interruption)
            workflow.set_current_details(sentence)
            result.notes.append(f"summary: {sentence}")  # kept in the result, worker or not
            if not workflow.unsafe.is_replaying():
                with workflow.unsafe.sandbox_unrestricted():
                    record_recovery(result, interruption, started, finished)
        return result


class TelemetryInterceptor(Interceptor):
    """Add to the worker's interceptors (``workers.recovery_worker.build_worker``)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityInbound(next)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _WorkflowInbound
