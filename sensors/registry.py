"""The sensors a service runs: an interface and a registry, so the service starts the sensors
the configuration enables without knowing any of them.

A sensor is a :class:`SensorSpec`: its name, the part of a deployment it belongs to (the
Slurm ``watcher`` process, or the job-log ``follower``), whether the configuration enables
it, and how it starts (a coroutine given a :class:`SensorContext` and the stop event,
returning the task that runs it). A new sensor is one module and one entry of
:data:`SENSORS`. Each starter imports its sensor when it starts, so a process imports only
the sensors it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Literal

from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import Interruption
from resurrect.scheduler.base import Scheduler

log = logging.getLogger(__name__)

SensorPart = Literal["watcher", "follower"]


@dataclass(frozen=True)
class SensorContext:
    """What every sensor may use: the configuration, Temporal, the scheduler, how to report
    an interruption, and an exit stack for what must be closed when the service stops."""

    config: ResurrectConfig
    client: Client
    scheduler: Scheduler
    report: Callable[[Interruption], Awaitable[str]]
    stack: contextlib.AsyncExitStack


Starter = Callable[[SensorContext, asyncio.Event], Awaitable[asyncio.Task[None]]]


@dataclass(frozen=True)
class SensorSpec:
    """One sensor: see the module's doc."""

    name: str
    part: SensorPart
    enabled: Callable[[ResurrectConfig], bool]
    start: Starter


async def _slurm_watcher(ctx: SensorContext, stop: asyncio.Event) -> asyncio.Task[None]:
    """Slurm's job and node states, polled, and at once when a Slurm hook kicks it."""
    from resurrect.sensors.slurm_watcher import SlurmWatcher

    watcher = SlurmWatcher(ctx.scheduler, ctx.config, ctx.report)
    if ctx.config.watcher.kick_hooks:
        from resurrect.sensors.watcher_kick import KickListener, KickSocketError

        listener = KickListener(ctx.config.watcher.kick_socket, lambda reason: watcher.kick())
        try:
            await listener.start()
            ctx.stack.callback(listener.close)
        except KickSocketError as refused:
            # the watcher still polls every poll_interval_s; only kicks are lost
            log.error("Slurm hook kicks are OFF: %s", refused)
    return asyncio.create_task(watcher.run(stop), name="watcher")


async def _goodput_metrics(ctx: SensorContext, stop: asyncio.Event) -> asyncio.Task[None]:
    """The cluster's goodput, published as metrics."""
    from resurrect.goodput.publisher import GoodputPublisher

    publisher = GoodputPublisher(ctx.client, ctx.scheduler, ctx.config)
    return asyncio.create_task(publisher.run(stop), name="goodput-metrics")


async def _lemon_metrics(ctx: SensorContext, stop: asyncio.Event) -> asyncio.Task[None]:
    """The nodes' lemon scores, published as metrics."""
    from resurrect.lemons.publisher import LemonPublisher

    publisher = LemonPublisher(ctx.client, ctx.config)
    return asyncio.create_task(publisher.run(stop), name="lemon-metrics")


async def _liveness_collector(ctx: SensorContext, stop: asyncio.Event) -> asyncio.Task[None]:
    """The node agents' heartbeat datagrams."""
    from resurrect.sensors.liveness.service import start_collector

    return await start_collector(ctx.config, ctx.client, stop)


async def _log_follower(ctx: SensorContext, stop: asyncio.Event) -> asyncio.Task[None]:
    """Running jobs' output, progress and checkpoints: faults, hangs, stragglers."""
    from resurrect.rules import load_engine
    from resurrect.sensors.log_follower import JobLogFollower

    config = ctx.config
    engine = load_engine(config.rules.extra_packs)
    if config.watcher.stack_probes == "agents":
        from resurrect.stacks.agent_ranks import agent_ranks

        conf = config.cluster.slurm_conf
        ranks = agent_ranks(
            ctx.client,
            asyncio.get_running_loop(),
            config.cluster.name,
            str(conf) if conf is not None else None,
        )
        follower = JobLogFollower(ctx.scheduler, config, engine, ctx.report, rank_access=ranks)
    else:
        follower = JobLogFollower(ctx.scheduler, config, engine, ctx.report)
    return asyncio.create_task(follower.run(stop), name="log-follower")


SENSORS: tuple[SensorSpec, ...] = (
    SensorSpec("watcher", "watcher", lambda c: True, _slurm_watcher),
    SensorSpec(
        "goodput-metrics",
        "watcher",
        lambda c: c.telemetry.enabled and bool(c.telemetry.goodput_interval_s),
        _goodput_metrics,
    ),
    SensorSpec(
        "lemon-metrics",
        "watcher",
        lambda c: (
            c.telemetry.enabled
            and c.lemons.enabled
            and c.repair.enabled
            and bool(c.lemons.metrics_interval_s)
        ),
        _lemon_metrics,
    ),
    SensorSpec(
        "liveness-collector",
        "watcher",
        lambda config: config.liveness.collector,
        _liveness_collector,
    ),
    SensorSpec(
        "log-follower", "follower", lambda config: config.watcher.follow_logs, _log_follower
    ),
)


def enabled_sensors(config: ResurrectConfig, parts: Collection[SensorPart]) -> list[SensorSpec]:
    """The sensors of ``parts`` that ``config`` enables, in registry order."""
    return [spec for spec in SENSORS if spec.part in parts and spec.enabled(config)]


async def start_sensors(
    ctx: SensorContext, parts: Collection[SensorPart], stop: asyncio.Event
) -> list[asyncio.Task[None]]:
    """Start every sensor of ``parts`` the configuration enables; their tasks."""
    return [await spec.start(ctx, stop) for spec in enabled_sensors(ctx.config, parts)]
