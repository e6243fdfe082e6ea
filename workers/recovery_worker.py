"""The worker process: hosts the recovery workflows and activities (beside slurmctld).

Only wiring lives here. ``run_worker`` runs until ``stop`` is set (SIGTERM/SIGINT in the
CLI), then shuts down gracefully: it stops polling and lets running activities finish
within ``graceful_shutdown_s``; Temporal hands anything unfinished to the next worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Sequence
from typing import Any
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.recovery import RecoveryActivities
from resurrect.config import ResurrectConfig
from resurrect.scheduler.base import Scheduler
from workflows.recovery import RecoveryWorkflow

log = logging.getLogger(__name__)

# Our own pure modules are passed through the sandbox: they are deterministic, and
# re-importing them (and pydantic) per workflow run costs 2-3x throughput.
PASSTHROUGH_MODULES = (
    "resurrect",
    "workflows.names",
    "pydantic",
    "pydantic_core",
    "annotated_types",
)


def workflow_classes() -> list[type]:
    classes: list[type] = [RecoveryWorkflow]
    try:
        from workflows.node_health import NodeHealthWorkflow
    except ImportError:  # the node-health workflow is optional in a minimal install
        return classes
    classes.append(NodeHealthWorkflow)
    return classes


def extra_activities(
    scheduler: Scheduler, config: ResurrectConfig, client: Client
) -> list[Callable[..., Any]]:
    try:
        from activities.node_health import NodeHealthActivities
    except ImportError:
        return []
    return list(NodeHealthActivities(scheduler=scheduler, config=config, client=client).all())


def build_worker(
    client: Client,
    config: ResurrectConfig,
    scheduler: Scheduler,
    *,
    extra: Sequence[Callable[..., Any]] = (),
    graceful_shutdown_s: float = 10.0,
) -> Worker:
    recovery = RecoveryActivities(scheduler=scheduler, config=config, client=client)
    activities = [*recovery.all(), *extra_activities(scheduler, config, client), *extra]
    return Worker(
        client,
        task_queue=config.temporal.task_queue,
        workflows=workflow_classes(),
        activities=activities,
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=16),
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
        ),
        graceful_shutdown_timeout=timedelta(seconds=graceful_shutdown_s),
    )


async def run_worker(worker: Worker, stop: asyncio.Event) -> None:
    """Run ``worker`` until ``stop`` is set, then shut it down gracefully."""
    task = asyncio.create_task(worker.run())
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        stopper.cancel()
        task.result()  # re-raise a worker failure
        return
    log.info("worker shutting down")
    await worker.shutdown()
    await task
