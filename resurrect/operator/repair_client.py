"""Calls to a node's NodeRepairWorkflow: report a drain or an incident (signal-with-start),
read its state and the exclusions it records."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime

from temporalio.client import (
    Client,
    WorkflowQueryFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy

from resurrect.carry_over import carry_over
from resurrect.config import ResurrectConfig
from resurrect.contracts.workflow_ids import node_repair_workflow_id
from resurrect.contracts.workflow_names import (
    NODE_DRAINED_SIGNAL,
    NODE_INCIDENT_SIGNAL,
    NODE_REPAIR_WORKFLOW,
    NODE_STATE_QUERY,
)
from resurrect.operator.models import (
    NodeDrainReport,
    NodeIncidentReport,
    NodeRepairState,
    RepairTimings,
)
from resurrect.operator.task_queues import (
    on_operator_queue,
    operator_task_queue,
    query_operator_workflow,
    runs_on_operator_queue,
)

log = logging.getLogger(__name__)


def repair_timings(config: ResurrectConfig) -> RepairTimings:
    return carry_over(config.repair, RepairTimings)


async def report_to_repair(
    client: Client | None, config: ResurrectConfig, node: str, report: NodeDrainReport
) -> None:
    """Start (or signal) ``node``'s repair workflow: resurrect drained or excluded it."""
    await _signal_with_start(client, config, node, NODE_DRAINED_SIGNAL, report)


async def report_incident(
    client: Client | None, config: ResurrectConfig, node: str, report: NodeIncidentReport
) -> None:
    """Start (or signal) ``node``'s repair workflow: a recovery implicated it (its lemon
    record)."""
    await _signal_with_start(client, config, node, NODE_INCIDENT_SIGNAL, report)


async def _signal_with_start(
    client: Client | None,
    config: ResurrectConfig,
    node: str,
    signal: str,
    report: NodeDrainReport | NodeIncidentReport,
) -> None:
    if client is None or not config.repair.enabled:
        return
    cluster = config.cluster.name
    workflow_id = node_repair_workflow_id(cluster, node)

    async def signal_with_start() -> None:
        await client.start_workflow(
            NODE_REPAIR_WORKFLOW,
            NodeRepairState(cluster=cluster, node=node, timings=repair_timings(config)),
            id=workflow_id,
            task_queue=operator_task_queue(config),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=signal,
            start_signal_args=[report],
        )

    await on_operator_queue(client, config, workflow_id, signal_with_start)


async def node_state(
    client: Client, cluster: str, node: str, deployment: ResurrectConfig | None = None
) -> NodeRepairState | None:
    """A node's repair state (history), or None when resurrect never drained it (or, with
    ``deployment``, when its repair workflow does not run on that deployment's operator task
    queue)."""
    workflow_id = node_repair_workflow_id(cluster, node)
    if deployment is not None and not await runs_on_operator_queue(client, deployment, workflow_id):
        return None
    try:
        return await query_operator_workflow(client, workflow_id, NODE_STATE_QUERY, NodeRepairState)
    except (WorkflowQueryFailedError, TimeoutError):
        return None  # no worker serves it (another task queue): as if unknown


async def exclusion_records(
    client: Client | None, config: ResurrectConfig, job_id: str, nodes: Sequence[str]
) -> tuple[dict[str, datetime], dict[str, datetime]]:
    """For ``nodes`` (a job's exclusion list): when resurrect excluded each from ``job_id``,
    and when each last returned to service (from the nodes' repair workflows)."""
    ours: dict[str, datetime] = {}
    returned: dict[str, datetime] = {}
    if client is None or not nodes:
        return ours, returned
    cluster = config.cluster.name
    states = await asyncio.gather(*[node_state(client, cluster, n, config) for n in nodes])
    for node, state in zip(nodes, states, strict=True):
        if state is None:
            continue
        if job_id in state.exclusions:
            ours[node] = state.exclusions[job_id]
        if state.returned_at is not None and state.status == "in_service":
            returned[node] = state.returned_at
    return ours, returned
