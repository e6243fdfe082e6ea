"""Starting the liveness collector inside ``resurrect watch`` / ``serve``."""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.sensors.liveness.collector import LivenessCollector
from resurrect.sensors.liveness.forward import TemporalForwarder
from resurrect.sensors.liveness.wire import load_key

log = logging.getLogger(__name__)


async def start_collector(
    config: ResurrectConfig, client: Client, stop: asyncio.Event
) -> asyncio.Task[None]:
    """Bind the collector's socket (errors surface now) and run it until ``stop``."""
    settings = config.liveness
    forwarder = TemporalForwarder(
        client, cluster=config.cluster.name, task_queue=config.temporal.task_queue
    )
    collector = LivenessCollector(
        load_key(settings.key_file), config.cluster.name, forwarder, refresh_s=settings.refresh_s
    )
    host, port = await collector.listen(settings.host, settings.port)
    log.info("liveness collector listening on %s:%d (udp)", host, port)

    async def run() -> None:
        try:
            await asyncio.gather(collector.watch(stop), collector.forward(stop))
        finally:
            collector.close()

    return asyncio.create_task(run(), name="liveness-collector")
