"""The worker process: hosts the recovery workflows and activities (beside slurmctld).

Only wiring lives here: the built-in and plugin steps become activities, the recovery plans
are loaded and checked against exactly those activities (a plan naming an activity that no
worker registers stops start-up, instead of failing a recovery midway), and the rule packs
the job's output is read with are loaded (a broken pack stops start-up too). ``run_worker`` runs
until ``stop`` is set (SIGTERM/SIGINT in the CLI), then shuts down gracefully: it stops
polling and lets running activities finish within ``graceful_shutdown_s``; Temporal hands
anything unfinished to the next worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from resurrect.activities.operator import OperatorActivities
from resurrect.activities.recovery import RecoveryActivities
from resurrect.activities.steps import builtin_steps
from resurrect.config import ResurrectConfig
from resurrect.goodput.advice_note import RATES, cluster_rates_now
from resurrect.lemons.board import board_for
from resurrect.lemons.records import lemons_enabled
from resurrect.operator.approval_auth import ApprovalInterceptor, ApprovalVerifier
from resurrect.operator.task_queues import budget_task_queue, operator_task_queue
from resurrect.plans.loader import check_plans, load_plans
from resurrect.plans.models import ResolvedPlan
from resurrect.rules import load_engine
from resurrect.scheduler.base import Scheduler
from resurrect.steps.plugins import Plugin, discover, params_registry, step_registry
from resurrect.steps.runtime import StepFn, StepRuntime, make_activity, step_meta
from resurrect.telemetry.interceptor import TelemetryInterceptor
from resurrect.temporal.releases import worker_identity
from resurrect.workflows.drain_budget import DrainBudgetWorkflow
from resurrect.workflows.node_repair import NodeRepairWorkflow
from resurrect.workflows.recovery import RecoveryWorkflow

log = logging.getLogger(__name__)

# With ``temporal.workflow_sandbox`` (the default) our own pure modules are passed through
# the sandbox: they are deterministic, and re-importing them (and pydantic) per workflow run
# costs 2-3x throughput. The sandbox stops workflow code from reading the clock, randomness or
# files by mistake (a recovery that replays differently fails); without it a burst of 800
# node losses measured 3-6 CPU-ms less worker CPU per recovery, its throughput within the
# noise (benchmarks/burst.py, lever ``unsandboxed``).
PASSTHROUGH_MODULES = (
    "resurrect",
    "pydantic",
    "pydantic_core",
    "annotated_types",
)


# Steps that wait on the budget and repair workflows (an update, a signal-with-start): run as
# local activities only when those workflows have a worker of their own, so a burst of
# recoveries draining at once cannot hold every workflow-task slot the budget waits for.
# Each checks before it acts (VerifiedScheduler), so a run again after a crash is a no-op.
QUICK_WITH_OPERATOR_QUEUE = ("recovery.drain_nodes", "recovery.requeue_job")


def own_operator_queue(config: ResurrectConfig) -> str | None:
    """The task queue of the budget and repair workflows when it is their own (a worker of
    their own serves it: the default, ``<task_queue>-operator``); None when
    ``temporal.operator_task_queue`` is set to ``task_queue`` itself, to share that queue."""
    queue = operator_task_queue(config)
    return queue if queue != config.temporal.task_queue else None


@dataclass
class RecoveryCatalogue:
    """What a worker runs: every step by activity name, and the checked plans."""

    steps: dict[str, StepFn]
    plans: list[ResolvedPlan]
    plugins: list[Plugin]
    plugin_errors: list[str]


def load_catalogue(
    config: ResurrectConfig, *, plugins: Sequence[Plugin] | None = None
) -> RecoveryCatalogue:
    """Plugins (enabled by name), steps, plans; raises PluginError/PlanError on conflicts."""
    if plugins is None:
        loaded = discover(config.plugins.enabled)
        found, errors = loaded.plugins, loaded.errors
    else:
        found, errors = list(plugins), []
    steps = step_registry(builtin_steps(), found)
    plans = load_plans(
        config.plans.paths,
        include_shipped=config.plans.include_shipped,
        defaults=[path for plugin in found for path in plugin.plans],
    )
    check_plans(plans, params_registry(steps))
    plans = mark_risky_steps(plans, steps)
    return RecoveryCatalogue(steps=steps, plans=plans, plugins=list(found), plugin_errors=errors)


def mark_risky_steps(plans: list[ResolvedPlan], steps: dict[str, StepFn]) -> list[ResolvedPlan]:
    """Each plan step whose code is marked ``risky`` (``@step(risky=True)``) says so, so the
    recovery can ask for approval before it (the workflow never sees the code)."""
    marked = []
    for plan in plans:
        resolved = [
            s.model_copy(update={"risky": True})
            if s.activity in steps and step_meta(steps[s.activity]).risky
            else s
            for s in plan.steps
        ]
        marked.append(plan.model_copy(update={"steps": resolved}))
    return marked


def workflow_classes() -> list[type]:
    classes: list[type] = [RecoveryWorkflow, DrainBudgetWorkflow, NodeRepairWorkflow]
    try:
        from resurrect.workflows.node_health import NodeHealthWorkflow
    except ImportError:  # the node-health workflow is optional in a minimal install
        return classes
    classes.append(NodeHealthWorkflow)
    return classes


def node_health_activities(
    scheduler: Scheduler, config: ResurrectConfig, client: Client
) -> list[Callable[..., Any]]:
    try:
        from resurrect.activities.node_health import NodeHealthActivities
    except ImportError:
        return []
    activities = NodeHealthActivities(scheduler=scheduler, client=client, config=config)
    return [activities.report_node_fault]


def workflow_runner(sandboxed: bool) -> WorkflowRunner:
    """The sandboxed runner, our pure modules passed through (see PASSTHROUGH_MODULES), or
    the unsandboxed one (``temporal.workflow_sandbox`` off)."""
    if not sandboxed:
        return UnsandboxedWorkflowRunner()
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


def quick_steps(steps: Mapping[str, StepFn], config: ResurrectConfig) -> list[str]:
    """The plan steps a recovery tries first as local activities (the one rule, read by the
    workflow from the assessment): those marked ``@step(quick=True)``, and drain and
    requeue when the budget and repair workflows have a task queue and worker of their own
    (``QUICK_WITH_OPERATOR_QUEUE``)."""
    extra = QUICK_WITH_OPERATOR_QUEUE if own_operator_queue(config) else ()
    return sorted(name for name, fn in steps.items() if step_meta(fn).quick or name in extra)


def build_worker(
    client: Client,
    config: ResurrectConfig,
    scheduler: Scheduler,
    *,
    plugins: Sequence[Plugin] | None = None,
    graceful_shutdown_s: float = 10.0,
    workflows: Sequence[type] | None = None,
    sandboxed: bool | None = None,
    max_cached_workflows: int = 1000,
    max_concurrent_workflow_tasks: int | None = None,
) -> Worker:
    """The worker of the recoveries (and, without ``temporal.operator_task_queue``, of the
    budget and repair workflows); with those on their own, drain and requeue run as local
    activities too (``QUICK_WITH_OPERATOR_QUEUE``). ``sandboxed``: None for the configured
    ``temporal.workflow_sandbox``."""
    catalogue = load_catalogue(config, plugins=plugins)
    runtime = StepRuntime(scheduler=scheduler, config=config, client=client)
    step_activities = [
        make_activity(
            fn,
            runtime,
            activity_name=name,
            settings=config.plugins.settings.get(name.split(".", 1)[0], {}),
        )
        for name, fn in catalogue.steps.items()
    ]
    recovery = RecoveryActivities(
        scheduler=scheduler,
        config=config,
        engine=load_engine(config.rules.extra_packs),
        client=client,
        plans=catalogue.plans,
        quick_steps=quick_steps(catalogue.steps, config),
    )
    activities = [
        *recovery.all(),
        *step_activities,
        *node_health_activities(scheduler, config, client),
        *OperatorActivities(scheduler, config).all(),
    ]
    log.info(
        "worker: %d plans, steps %s",
        len(catalogue.plans),
        ", ".join(sorted(catalogue.steps)),
    )
    return Worker(
        client,
        task_queue=config.temporal.task_queue,
        identity=worker_identity(),
        workflows=list(workflows) if workflows is not None else workflow_classes(),
        activities=activities,
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=16),
        workflow_runner=workflow_runner(
            config.temporal.workflow_sandbox if sandboxed is None else sandboxed
        ),
        graceful_shutdown_timeout=timedelta(seconds=graceful_shutdown_s),
        max_cached_workflows=max_cached_workflows,
        max_concurrent_workflow_tasks=max_concurrent_workflow_tasks,
        interceptors=[
            TelemetryInterceptor(),
            ApprovalInterceptor(ApprovalVerifier.from_config(config)),
        ],
    )


def build_operator_worker(
    client: Client,
    config: ResurrectConfig,
    scheduler: Scheduler,
    *,
    graceful_shutdown_s: float = 10.0,
) -> Worker | None:
    """The worker of the node-repair workflows on their own task queue
    (``temporal.operator_task_queue``), with workflow-task slots of their own (and of a drain
    budget a release before started there); None when they share the recoveries' task queue
    (``build_worker`` runs them then)."""
    queue = own_operator_queue(config)
    if queue is None:
        return None
    return _operator_worker(
        client,
        config,
        scheduler,
        queue,
        [DrainBudgetWorkflow, NodeRepairWorkflow],
        4,
        graceful_shutdown_s,
    )


def build_budget_worker(
    client: Client,
    config: ResurrectConfig,
    scheduler: Scheduler,
    *,
    graceful_shutdown_s: float = 10.0,
) -> Worker | None:
    """The worker of the drain budget on its own task queue (``budget_task_queue``): the
    updates every drain step waits for are not queued behind the workflow tasks of the repair
    workflows a burst starts. None when the operator queue is shared with the recoveries'."""
    if own_operator_queue(config) is None:
        return None
    return _operator_worker(
        client,
        config,
        scheduler,
        budget_task_queue(config),
        [DrainBudgetWorkflow],
        2,
        graceful_shutdown_s,
    )


def build_operator_workers(
    client: Client,
    config: ResurrectConfig,
    scheduler: Scheduler,
    *,
    graceful_shutdown_s: float = 10.0,
) -> list[Worker]:
    """The workers ``resurrect worker`` runs beside the recoveries' (``build_worker``): the
    repair workflows' and the drain budget's (none when they share the recoveries' queue)."""
    built = (
        build(client, config, scheduler, graceful_shutdown_s=graceful_shutdown_s)
        for build in (build_operator_worker, build_budget_worker)
    )
    return [worker for worker in built if worker is not None]


def _operator_worker(
    client: Client,
    config: ResurrectConfig,
    scheduler: Scheduler,
    queue: str,
    workflows: Sequence[type],
    activity_threads: int,
    graceful_shutdown_s: float,
) -> Worker:
    return Worker(
        client,
        task_queue=queue,
        identity=worker_identity(),
        workflows=list(workflows),
        activities=OperatorActivities(scheduler, config).all(),
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=activity_threads),
        workflow_runner=workflow_runner(config.temporal.workflow_sandbox),
        graceful_shutdown_timeout=timedelta(seconds=graceful_shutdown_s),
        interceptors=[TelemetryInterceptor()],
    )


async def read_kept_figures(client: Client, config: ResurrectConfig, scheduler: Scheduler) -> None:
    """Read once, as the worker starts, the figures the process keeps for its recoveries
    (the lemon board, the checkpoint advice's cluster rates), so that the first recoveries,
    a burst among them, find them kept instead of each waiting for the first read. A
    failure is logged; the recoveries read them later (or go on without them, noting it)."""
    reads: list[Awaitable[object]] = [
        RATES.rates(
            config.cluster.name,
            lambda: cluster_rates_now(client, scheduler, config, datetime.now(UTC)),
        )
    ]
    if lemons_enabled(config):
        reads.append(board_for(client, config).refresh())
    for result in await asyncio.gather(*reads, return_exceptions=True):
        if isinstance(result, Exception):
            log.warning("kept figures not read at start: %s", result)


def served_task_queues(config: ResurrectConfig) -> list[str]:
    """The task queues the workers of ``build_worker`` and ``build_operator_workers`` poll."""
    queue = own_operator_queue(config)
    return [config.temporal.task_queue, *([queue, budget_task_queue(config)] if queue else [])]


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
