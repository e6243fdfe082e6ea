"""Recoveries as their Temporal histories tell them: when each one started, when the job was
requeued and seen running again, which checkpoint step it resumes from.

:func:`recovery_from_history` is pure (a history in, a :class:`RecoveryRecord` out); which
step requeued the job or verified the checkpoint is read from the step results themselves
(``requeued``, ``running_again``, ``checkpoint``), so plugin steps count as the built-ins do.
:func:`load_recoveries` lists a job's recoveries by the ``ResurrectJobId`` search attribute
and reads each history.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import PayloadConverter
from temporalio.exceptions import TemporalError

from resurrect.contracts import (
    Interruption,
    JobInfo,
    RecoveryContext,
    RecoveryOutcome,
    StepResult,
)
from resurrect.contracts.assessment import Assessment
from resurrect.goodput.model import RecoveryRecord
from resurrect.job_incarnation import split_by_incarnation
from resurrect.temporal.history import local_activity

# Activities every recovery runs before its plan's steps (contracts.workflow_names.Activity), as
# local activities or activity tasks; every other activity is a plan step returning a
# StepResult.
GATHER_EVIDENCE = "recovery.gather_evidence"
ASSESS = "recovery.assess"
_NOT_STEPS = frozenset({GATHER_EVIDENCE, ASSESS})
REPORT_SIGNAL = "report"
_CLOSED = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    }
)


def _time(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


def _decode(converter: PayloadConverter, payloads: Any, kind: type[Any]) -> Any:
    """The first payload as ``kind``, or None when it is not one (an older contract)."""
    if not payloads.payloads:
        return None
    try:
        return converter.from_payloads(payloads.payloads, [kind])[0]
    except (TemporalError, ValueError, TypeError):
        return None


def _earliest_observation(interruption: Interruption) -> datetime:
    times = [interruption.observed_at]
    times.extend(e.observed_at for e in interruption.evidence if e.observed_at is not None)
    return min(t if t.tzinfo else t.replace(tzinfo=UTC) for t in times)


def recovery_from_history(history: WorkflowHistory, converter: PayloadConverter) -> RecoveryRecord:
    """What one recovery's history says about the interruption's cost."""
    events = list(history.events)
    started = _time(events[0])
    interruption: Interruption = _decode(
        converter, events[0].workflow_execution_started_event_attributes.input, Interruption
    )
    observed: list[datetime] = []
    if interruption is not None:
        observed.append(_earliest_observation(interruption))
    record: dict[str, Any] = {
        "workflow_id": history.workflow_id,
        "cluster": interruption.cluster if interruption else "",
        "job_id": interruption.job_id if interruption else "",
        "attempt": interruption.restart_count if interruption else 0,
        "fault_class": interruption.fault_hint.value
        if interruption and interruption.fault_hint
        else "unknown",
        "started_at": started,
        "nodes": sorted(set(interruption.nodes)) if interruption else [],
    }
    names: dict[int, str] = {}
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signaled = event.workflow_execution_signaled_event_attributes
            if signaled.signal_name == REPORT_SIGNAL:
                report = _decode(converter, signaled.input, Interruption)
                if report is not None:
                    observed.append(_earliest_observation(report))
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            _fold_activity(
                record, names.get(done.scheduled_event_id, ""), done.result, _time(event), converter
            )
        elif (local := local_activity(event)) is not None:
            at = local.completed_at or _time(event)
            _fold_activity(record, local.name, local.result, at, converter)
        elif kind in _CLOSED:
            record["closed_at"] = _time(event)
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
                outcome = _decode(
                    converter,
                    event.workflow_execution_completed_event_attributes.result,
                    RecoveryOutcome,
                )
                if outcome is not None:
                    record["outcome"] = outcome.outcome
                    record["fault_class"] = outcome.fault_class.value
                    record["drained_nodes"] = list(outcome.drained_nodes)
                    if (
                        outcome.checkpoint is not None
                        and outcome.checkpoint.resume_step is not None
                    ):
                        record["resume_step"] = outcome.checkpoint.resume_step
            else:
                record["outcome"] = (
                    EventType.Name(kind).removeprefix("EVENT_TYPE_WORKFLOW_EXECUTION_").lower()
                )
    if observed:
        record["first_observed_at"] = min(observed)
    return RecoveryRecord.model_validate(record)


def _fold_activity(
    record: dict[str, Any],
    name: str,
    result: Any,
    at: datetime,
    converter: PayloadConverter,
) -> None:
    if name == GATHER_EVIDENCE:
        # the first read is the interrupted attempt's: a later one (the second-source wait's,
        # the 0.2.1 re-read after the grace) may already see the job as Slurm requeued it, with
        # a new start and a new submit time
        bundle = _decode(converter, result, RecoveryContext)
        if bundle is not None:
            for key, value in (
                ("interrupted_attempt_started_at", bundle.job.start_time),
                ("job_submitted_at", bundle.job.submit_time),
            ):
                if value is not None and key not in record:
                    record[key] = value if value.tzinfo else value.replace(tzinfo=UTC)
        return
    if name == ASSESS:
        assessment = _decode(converter, result, Assessment)
        if assessment is not None:
            record["fault_class"] = assessment.diagnosis.fault_class.value
        return
    step = _decode(converter, result, StepResult)
    if step is None:
        return
    if step.requeued and "requeued_at" not in record:
        record["requeued_at"] = at
    if step.running_again and "running_again_at" not in record:
        record["running_again_at"] = at
    if step.drained_nodes:
        record["drained_nodes"] = sorted({*record.get("drained_nodes", []), *step.drained_nodes})
    if step.checkpoint is not None and step.checkpoint.resume_step is not None:
        record["resume_step"] = step.checkpoint.resume_step


def recoveries_query(job_id: str | None, since: datetime | None, cluster: str | None = None) -> str:
    """The visibility query listing recoveries (ids are validated by the caller)."""
    query = "WorkflowType = 'RecoveryWorkflow'"
    if job_id is not None:
        query += f" AND ResurrectJobId = '{job_id}'"
    if cluster is not None:
        query += f" AND ResurrectCluster = '{cluster}'"
    if since is not None:
        query += f" AND StartTime >= '{since.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}'"
    return query


async def load_recoveries(
    client: Client,
    *,
    job_id: str | None = None,
    since: datetime | None = None,
    cluster: str | None = None,
    limit: int = 1000,
    job: JobInfo | None = None,
) -> list[RecoveryRecord]:
    """Every recovery matching, read from its history, oldest first; with ``job`` (as the
    scheduler shows it now), only those of its incarnation, not of other jobs that had its
    id (:mod:`resurrect.job_incarnation`)."""
    records: list[RecoveryRecord] = []
    converter = client.data_converter.payload_converter
    executions = [
        e
        async for e in client.list_workflows(recoveries_query(job_id, since, cluster), limit=limit)
    ]
    if job is not None:
        executions = split_by_incarnation(job, executions).own
    for execution in executions:
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        records.append(recovery_from_history(history, converter))
    return sorted(records, key=lambda r: r.started_at)
