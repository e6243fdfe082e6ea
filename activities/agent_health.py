"""What a node's agent reported, read from its node health workflow (its ``health`` query)."""

from __future__ import annotations

import asyncio

from temporalio.client import Client, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.service import RPCError

from resurrect.contracts.node_health import HEALTH_QUERY, NodeHealth
from resurrect.contracts.workflow_ids import node_health_workflow_id

AGENT_QUERY_TIMEOUT_S = 5.0
# Agent states in which it is watching its node (a finding would reach us).
WATCHING_STATUSES = frozenset({"healthy", "degraded", "faulty"})


async def agent_health(client: Client, cluster: str, node: str) -> NodeHealth | None:
    """What the node agent of ``node`` reported (its NodeHealthWorkflow); None when no agent
    runs there or it cannot answer."""
    handle = client.get_workflow_handle(node_health_workflow_id(cluster, node))
    try:
        health: NodeHealth = await asyncio.wait_for(
            handle.query(HEALTH_QUERY, result_type=NodeHealth), AGENT_QUERY_TIMEOUT_S
        )
    except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError, TimeoutError):
        return None
    return health
