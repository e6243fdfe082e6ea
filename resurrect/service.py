"""Running resurrect's long-lived parts: embedded Temporal, worker, watcher, log follower.

``run_service`` runs the parts a deployment enables: the workers, and the sensors that the
registry (``resurrect.sensors.registry``) names for the watcher and the follower.
``resurrect serve`` runs them all in one process (the single-host setup and the demo);
production runs ``resurrect worker`` and ``resurrect watch`` beside slurmctld against an
existing Temporal cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass

from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.scheduler.base import Scheduler
from resurrect.telemetry.tracing import with_tracing
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal

log = logging.getLogger(__name__)


def scheduler_from_config(config: ResurrectConfig) -> Scheduler:
    from resurrect.scheduler.factory import scheduler_for
    from resurrect.scheduler.hold_marker import HoldMarkKey

    return scheduler_for(config.cluster, HoldMarkKey(config.hold_mark_key_file))


def embedded_server(config: ResurrectConfig) -> EmbeddedTemporal:
    host, _, port = config.temporal.address.rpartition(":")
    return EmbeddedTemporal(
        state_dir=config.temporal.state_dir,
        host=host or "127.0.0.1",
        port=int(port),
        ui_port=config.temporal.ui_port,
        namespace=config.temporal.namespace,
        binary=config.temporal.temporal_binary,
        sqlite_pragmas=tuple(config.temporal.sqlite_pragmas),
    )


@contextlib.asynccontextmanager
async def temporal_for(config: ResurrectConfig) -> AsyncIterator[Client]:
    """A client, starting the embedded server first when the config asks for it."""
    server = embedded_server(config) if config.temporal.embedded else None
    if server is not None:
        await asyncio.to_thread(server.start)
        log.info("embedded Temporal on %s, web UI %s", server.address, server.ui_url)
    try:
        yield await connect(config.temporal, attempts=20)
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)


def stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


@dataclass
class ServiceParts:
    worker: bool = True
    watcher: bool = True
    follow_logs: bool = True


async def run_service(
    config: ResurrectConfig,
    parts: ServiceParts,
    stop: asyncio.Event,
    *,
    client: Client | None = None,
    scheduler: Scheduler | None = None,
) -> None:
    """Run the enabled parts until ``stop`` is set."""
    from resurrect.sensors.registry import SensorContext, SensorPart, start_sensors
    from resurrect.sensors.report import reporter
    from resurrect.temporal.registration import refuse_unregistered_search_attributes
    from resurrect.temporal.releases import refuse_other_releases, watch_other_releases
    from resurrect.workers.recovery_worker import (
        build_operator_workers,
        build_worker,
        read_kept_figures,
        run_worker,
        served_task_queues,
    )

    async with contextlib.AsyncExitStack() as stack:
        if client is None:
            client = await stack.enter_async_context(temporal_for(config))
        client = with_tracing(client, config.telemetry)
        scheduler = scheduler or scheduler_from_config(config)
        report = reporter(client, task_queue=config.temporal.task_queue)
        tasks: list[asyncio.Task[None]] = []
        if parts.worker:
            queues, window_s = served_task_queues(config), config.temporal.other_release_window_s
            await refuse_unregistered_search_attributes(client)
            await refuse_other_releases(client, queues, window_s)
            worker = build_worker(client, config, scheduler)
            tasks.append(asyncio.create_task(run_worker(worker, stop), name="worker"))
            watch = watch_other_releases(client, queues, window_s, stop)
            tasks.append(asyncio.create_task(watch, name="release watch"))
            kept = asyncio.create_task(read_kept_figures(client, config, scheduler))
            stack.callback(kept.cancel)  # a read still under way at the end is dropped
            operators = build_operator_workers(client, config, scheduler)
            for name, operator in zip(("operator", "drain budget"), operators, strict=False):
                tasks.append(asyncio.create_task(run_worker(operator, stop), name=name))
        sensor_parts: list[SensorPart] = []
        if parts.watcher:
            sensor_parts.append("watcher")
        if parts.follow_logs:
            sensor_parts.append("follower")
        context = SensorContext(config, client, scheduler, report, stack)
        tasks.extend(await start_sensors(context, sensor_parts, stop))
        if not tasks:
            return
        log.info(
            "resurrect running: %s (mode %s)", ", ".join(t.get_name() for t in tasks), config.mode
        )
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            exc = task.exception()
            if exc is not None:
                raise exc
