"""The node agent's side of stack probes: a Temporal worker on the node's own task queue.

Runs beside the agent's watch loop (``resurrect agent run``), as root like the agent, so
py-spy can read every rank of any job on the node. It hosts
:class:`~resurrect.workflows.stack_probe.StackProbeWorkflow` and its one activity, which
reads the stacks of one job attempt's ranks here (:func:`resurrect.stacks.probe.probe_here`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from resurrect.stacks.probe import (
    DUMP_STACKS_ACTIVITY,
    StackProbeRequest,
    StackProbeResult,
    agent_task_queue,
    probe_here,
)
from resurrect.workflows.stack_probe import StackProbeWorkflow

log = logging.getLogger(__name__)


def stack_dumper(node: str) -> Callable[[StackProbeRequest], StackProbeResult]:
    """The probe activity of the agent of ``node``: the ranks it finds are named after
    ``node`` (the node it runs on), never after what a request or a rank says."""

    @activity.defn(name=DUMP_STACKS_ACTIVITY)
    def dump_stacks(request: StackProbeRequest) -> StackProbeResult:
        """Where the job's ranks on this node are (py-spy, bounded), each rank's last
        collectives from its Flight Recorder dump (read as its owner's file), and NCCL RAS."""
        result = probe_here(request, here=node)
        log.info(
            "stack probe of job %s on %s: %d rank(s) in %.1f s",
            request.job_id,
            node,
            len(result.ranks),
            result.took_s,
        )
        return result

    return dump_stacks


def probe_worker(client: Client, cluster: str, node: str) -> Worker:
    """The worker that answers stack probes for ``node``."""
    return Worker(
        client,
        task_queue=agent_task_queue(cluster, node),
        workflows=[StackProbeWorkflow],
        activities=[stack_dumper(node)],
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=4),
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(
                "resurrect", "pydantic", "pydantic_core", "annotated_types"
            )
        ),
    )


async def serve_probes(client: Client, cluster: str, node: str, stop: asyncio.Event) -> None:
    """Answer stack probes until ``stop`` is set."""
    async with probe_worker(client, cluster, node):
        log.info("answering stack probes on %s", agent_task_queue(cluster, node))
        await stop.wait()
