"""Helpers shared by the end-to-end recovery tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError

from resurrect.config import ResurrectConfig
from resurrect.contracts import Interruption, JobInfo, JobState, RecoveryOutcome
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm
from resurrect.errors import SchedulerError
from resurrect.scheduler.base import Scheduler
from resurrect.sensors.report import report_interruption
from support.builders import opt_in

# The end-to-end jobs opt in with room for the restarts a test provokes.
OPT_IN = opt_in(max_restarts=3)

# First attempt: runs long (so a fault can hit it); after a requeue: finishes in seconds.
LONG_THEN_SHORT = """#!/bin/bash
steps=200; [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && steps=6
echo "attempt ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST"
srun bash -c 'for i in $(seq 1 '"$steps"'); do echo "[$SLURMD_NODENAME] step $i"; sleep 0.5; done'
"""


async def eventually(
    probe: Callable[[], Awaitable[JobInfo]],
    ok: Callable[[JobInfo], bool],
    timeout: float,
    what: str,
) -> JobInfo:
    """Read the job with ``probe`` until ``ok``; its last reading. A scheduler that cannot
    answer for a moment (slurmctld restarting) is read again; any other error of the probe
    is the test's to see, at once."""
    deadline = time.monotonic() + timeout
    last: JobInfo | SchedulerError | None = None
    while time.monotonic() < deadline:
        try:
            last = await probe()
        except SchedulerError as passing:
            last = passing
        else:
            if ok(last):
                return last
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


async def started(
    client: Client, workflow_id: str, timeout: float = 180
) -> WorkflowExecutionDescription:
    """Wait until a sensor has started the workflow; its description (start time ...)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await client.get_workflow_handle(workflow_id).describe()
        except RPCError:
            if time.monotonic() > deadline:
                raise AssertionError(f"workflow {workflow_id} never started") from None
            await asyncio.sleep(0.2)


async def outcome_of(client: Client, workflow_id: str, timeout: float = 180) -> RecoveryOutcome:
    """Wait until the workflow has started and finished; its outcome."""
    await started(client, workflow_id, timeout)
    handle = client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)
    result: RecoveryOutcome = await asyncio.wait_for(handle.result(), timeout=timeout)
    return result


async def recover(
    client: Client, config: ResurrectConfig, report: Interruption, timeout: float = 90
) -> RecoveryOutcome:
    """Report an interruption as a sensor does (a worker must serve ``config``'s task queue)
    and wait for the recovery's outcome."""
    workflow_id = await report_interruption(client, report, task_queue=config.temporal.task_queue)
    handle = client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)
    outcome: RecoveryOutcome = await asyncio.wait_for(handle.result(), timeout=timeout)
    return outcome


async def submit_running(
    cluster: LocalSlurm, scheduler: Scheduler, script: str = LONG_THEN_SHORT, **submit: object
) -> JobInfo:
    """Submit an opted-in 2-node job and wait until it runs."""
    job_id = cluster.submit(script, comment=OPT_IN, nodes=2, **submit)  # type: ignore[arg-type]
    return await running_on_two_nodes(scheduler, job_id)


class NodeLoss(NamedTuple):
    job: JobInfo  # the job as it ran before
    victim: str  # the node killed under it
    workflow_id: str  # the recovery that must follow
    killed_at: float  # time.time() of the kill


async def lose_a_node(
    cluster: LocalSlurm, scheduler: Scheduler, victim_index: int = -1, **submit: Any
) -> NodeLoss:
    """Submit an opted-in 2-node job, wait until it runs, then kill one of its nodes (the
    last by default)."""
    job = await submit_running(cluster, scheduler, **submit)
    victim = job.nodes[victim_index]
    killed_at = time.time()
    cluster.kill_node(victim)
    workflow_id = recovery_workflow_id(cluster.cluster_name, job.job_id, job.restart_count)
    return NodeLoss(job, victim, workflow_id, killed_at)


async def running_on_two_nodes(scheduler: Scheduler, job_id: str) -> JobInfo:
    """Wait until a freshly submitted 2-node job runs."""
    return await eventually(
        lambda: scheduler.get_job(job_id),
        lambda j: j.state is JobState.RUNNING and len(j.nodes) == 2,
        60,
        f"job {job_id} running on 2 nodes",
    )


async def completed(scheduler: Scheduler, job_id: str, timeout: float) -> JobInfo:
    """Wait until the job has run to completion."""
    return await eventually(
        lambda: scheduler.get_job(job_id),
        lambda j: j.state is JobState.COMPLETED,
        timeout,
        f"job {job_id} completed",
    )
