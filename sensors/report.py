"""How every sensor reports an interruption: signal-with-start of the job's RecoveryWorkflow.

The workflow id is per job attempt (``recover/<cluster>/<job>/<restart>``), the conflict
policy is USE_EXISTING and the reuse policy REJECT_DUPLICATE: ten sensors reporting one
failure make one workflow (the later reports arrive as ``report`` signals carrying their
evidence), and a recovery that already finished is never started again for the same attempt.
A report without evidence of its own starts the recovery or finds it started, and that is
all: the workflow reads only the evidence of later reports, so signalling it would cost the
server a workflow task per sensor for nothing (in a burst, most of its work).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from opentelemetry import trace
from temporalio.client import Client
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError

from resurrect.contracts import Interruption
from resurrect.contracts.workflow_names import RECOVERY_WORKFLOW, REPORT_SIGNAL
from resurrect.telemetry.record import earliest_evidence, record_report
from resurrect.telemetry.summary import reported_summary
from resurrect.temporal import search_attributes as sa

log = logging.getLogger(__name__)

# How a sensor hands an interruption on (``report_interruption`` bound to a client, or a
# test's recorder); the node agent's way out is another thing (``AgentReporter``).
ReportInterruption = Callable[[Interruption], Awaitable[object]]
tracer = trace.get_tracer("resurrect.sensors")


async def report_interruption(
    client: Client, interruption: Interruption, *, task_queue: str
) -> str:
    """Start (or signal) the recovery of ``interruption``'s job attempt; returns the id."""
    workflow_id = interruption.workflow_id
    attributes = sa.initial_attributes(interruption)
    # The recovery's trace starts here: Temporal's tracing interceptor (when the client has
    # it) carries this span's context into the workflow and its activities.
    with tracer.start_as_current_span(
        f"report {interruption.fault_hint or 'interruption'}",
        attributes={
            "resurrect.workflow_id": workflow_id,
            "resurrect.job_id": interruption.job_id,
            "resurrect.source": interruption.source,
            "resurrect.nodes": sorted(interruption.nodes),
        },
    ):
        await _start_or_signal(client, interruption, task_queue, attributes)
    lag = datetime.now(UTC).timestamp() - earliest_evidence(interruption)
    record_report(interruption.source, lag)
    return workflow_id


def reporter(client: Client, *, task_queue: str) -> Callable[[Interruption], Awaitable[str]]:
    """:func:`report_interruption` bound to ``client`` and the recoveries' ``task_queue``:
    what the service hands every sensor."""

    async def report(interruption: Interruption) -> str:
        return await report_interruption(client, interruption, task_queue=task_queue)

    return report


async def _start_or_signal(
    client: Client,
    interruption: Interruption,
    task_queue: str,
    attributes: TypedSearchAttributes,
) -> None:
    workflow_id = interruption.workflow_id
    with_evidence = bool(interruption.evidence)
    try:
        await client.start_workflow(
            RECOVERY_WORKFLOW,
            interruption,
            id=workflow_id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            start_signal=REPORT_SIGNAL if with_evidence else None,
            start_signal_args=[interruption] if with_evidence else [],
            search_attributes=attributes,
            static_summary=reported_summary(interruption),
        )
        log.info(
            "recovery %s: reported by %s (%s)",
            workflow_id,
            interruption.source,
            interruption.reason,
        )
    except WorkflowAlreadyStartedError:
        log.info(
            "recovery %s already finished; report from %s ignored", workflow_id, interruption.source
        )
