"""Running one recovery step in isolation, as a Temporal activity, without a cluster.

    result = await run_step(my_step, {"url": "http://127.0.0.1:9/hook"})

builds a recovery (a job on two fake nodes, a diagnosis, a plan), runs the step through
the same wrapper the worker uses (params validation, observe mode, error mapping) inside
Temporal's ActivityEnvironment, and returns its StepResult. Permanent failures raise
``ApplicationError`` with ``non_retryable=True``, as they would in a worker.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.testing import ActivityEnvironment

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    DEFAULT_ACTION,
    Diagnosis,
    Evidence,
    FaultClass,
    Interruption,
    JobInfo,
    JobPolicy,
    JobState,
    RecoveryContext,
    RecoveryDecision,
    RecoveryState,
    SignalKind,
    StepInput,
    StepResult,
)
from resurrect.scheduler.base import Scheduler
from resurrect.steps.runtime import StepFn, StepRuntime, make_activity, step_meta
from resurrect.testing.fake_scheduler import FakeScheduler


def make_step_input(
    activity: str,
    params: Mapping[str, Any] | None = None,
    *,
    observe: bool = False,
    job: JobInfo | None = None,
    fault_class: FaultClass = FaultClass.GPU_HARDWARE,
    culprits: list[str] | None = None,
    state: RecoveryState | None = None,
) -> StepInput:
    """A realistic recovery for step tests: job 42 on node1+node2, node2 implicated."""
    job = job or JobInfo(
        job_id="42",
        name="train",
        state=JobState.FAILED,
        user="alice",
        nodes=["node1", "node2"],
        num_nodes=2,
    )
    culprit_nodes = ["node2"] if culprits is None else culprits
    interruption = Interruption(
        cluster="test",
        job_id=job.job_id,
        restart_count=job.restart_count,
        source="test",
        reason="test recovery",
        observed_at=datetime.now(UTC),
        nodes=job.nodes,
    )
    bundle = RecoveryContext(
        interruption=interruption,
        job=job,
        policy=JobPolicy(),
        policy_source="comment",
        opted_in=True,  # a step only ever runs for a job that is opted in
        mode="observe" if observe else "act",
        wait_running_timeout_s=30,
        activity_timeout_s=30,
    )
    diagnosis = Diagnosis(
        fault_class=fault_class,
        action=DEFAULT_ACTION[fault_class],
        confidence=0.9,
        culprit_hosts=culprit_nodes,
        # what a source the job does not control saw on each culprit (planning drains only
        # what such a source confirms): Slurm for a lost node, the node agent otherwise
        evidence=[
            Evidence(
                kind=SignalKind.SCHEDULER_STATE
                if fault_class is FaultClass.NODE_LOST
                else SignalKind.KERNEL_LOG,
                source="scheduler" if fault_class is FaultClass.NODE_LOST else "node_agent",
                text=f"{fault_class.value} on {node}",
                role="root",
                fault_class=fault_class,
                host=node,
            )
            for node in culprit_nodes
        ],
    )
    decision = RecoveryDecision(
        action=DEFAULT_ACTION[fault_class],
        drain_nodes=culprit_nodes,
        exclude_nodes=culprit_nodes,
        requeue=True,
    )
    return StepInput(
        workflow_id=f"recover/test/{job.job_id}/{job.restart_count}",
        activity=activity,
        params=dict(params or {}),
        observe=observe,
        bundle=bundle,
        diagnosis=diagnosis,
        decision=decision,
        state=state or RecoveryState(),
    )


STEP_DEADLINE = timedelta(minutes=5)  # the start-to-close timeout a step runs under here


async def run_step(
    fn: StepFn,
    params: Mapping[str, Any] | None = None,
    *,
    scheduler: Scheduler | None = None,
    config: ResurrectConfig | None = None,
    observe: bool = False,
    settings: dict[str, Any] | None = None,
    step_input: StepInput | None = None,
) -> StepResult:
    """Run step ``fn`` once as an activity in isolation and return its result."""
    name = step_meta(fn).name
    runtime = StepRuntime(
        scheduler=scheduler or FakeScheduler.with_nodes(4, cluster_name="test"),
        config=config or ResurrectConfig(),
    )
    activity_fn = make_activity(fn, runtime, activity_name=name, settings=settings)
    payload = step_input or make_step_input(name, params, observe=observe)
    result: StepResult = await step_environment().run(activity_fn, payload)
    return result


def step_environment(run_id: str | None = None) -> ActivityEnvironment:
    """An activity environment as a recovery runs a step in: started now, with a step's usual
    deadline (the environment's default is a second since 1970: a step that sizes its own
    work by the time left would get one second), in the workflow run ``run_id`` (default: a
    recovery of its own)."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        started_time=datetime.now(UTC),
        workflow_run_id=run_id or str(uuid.uuid4()),
        start_to_close_timeout=STEP_DEADLINE,
        schedule_to_close_timeout=None,
    )
    return env
