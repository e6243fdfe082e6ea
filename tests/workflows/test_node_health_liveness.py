"""NodeHealthWorkflow fed by the liveness collector, on the real Temporal dev server: a
healthy node costs its workflow one signal, a silent one is reported once, and with the
collector gone the agent's fallback heartbeats make the workflow watch silence itself."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import FaultClass
from resurrect.contracts.workflow_ids import node_health_workflow_id
from resurrect.sensors.liveness.collector import MIN_SILENCE_THRESHOLD_S, LivenessCollector
from resurrect.sensors.liveness.forward import TemporalForwarder
from resurrect.sensors.liveness.wire import node_key
from resurrect.sensors.node_agent.collector_reporter import CollectorReporter
from tests.workflows.test_node_health import Reported, beat, health, make_config, reporter, worker

pytestmark = pytest.mark.temporal

KEY = b"liveness-test-key-0123456789abcdef"  # the collector's master key


@asynccontextmanager
async def collector(
    client: Client, config: ResurrectConfig, clock: Callable[[], float] = time.monotonic
) -> AsyncIterator[LivenessCollector]:
    forwarder = TemporalForwarder(
        client, cluster=config.cluster.name, task_queue=config.temporal.task_queue
    )
    made = LivenessCollector(KEY, config.cluster.name, forwarder, clock=clock)
    await made.listen("127.0.0.1", 0)
    stop = asyncio.Event()
    task = asyncio.gather(made.watch(stop, max_sleep_s=0.1), made.forward(stop))
    try:
        yield made
    finally:
        stop.set()
        await task
        made.close()


def agent_out(client: Client, config: ResurrectConfig, made: LivenessCollector, node: str):  # type: ignore[no-untyped-def]
    assert made.transport is not None
    host, port = made.transport.get_extra_info("sockname")[:2]
    return CollectorReporter(
        node_key(KEY, config.cluster.name, node),  # the node's own key
        (host, port),
        cluster=config.cluster.name,
        fallback=reporter(client, config, node),
        fallback_after_s=1.0,
    )


async def events(client: Client, workflow_id: str, kind: EventType.ValueType) -> int:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return sum(1 for e in history.events if e.event_type == kind)


async def signals(client: Client, workflow_id: str) -> int:
    return await events(client, workflow_id, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)


async def test_a_healthy_node_costs_one_signal_and_its_silence_is_reported_once(
    temporal_client: Client,
) -> None:
    config, report = make_config(), Reported()
    node = "gpu-l"
    workflow_id = node_health_workflow_id(config.cluster.name, node)
    skew = [0.0]  # added to the collector's clock
    async with (
        worker(temporal_client, config, node, report),
        collector(temporal_client, config, lambda: time.monotonic() + skew[0]) as made,
    ):
        out = agent_out(temporal_client, config, made, node)
        for seq in range(8):
            await out.heartbeat(beat(node, seq))
            await asyncio.sleep(0.4)
        healthy = await health(temporal_client, workflow_id)
        quiet_signals = await signals(temporal_client, workflow_id)
        last_beat = time.monotonic() - 0.4
        arrived = await report.wait(timeout=15)
        changes = made.stats.changes  # heard, then silent
        # The collector's clock passes every deadline again: it declares nothing more ...
        skew[0] += 3 * MIN_SILENCE_THRESHOLD_S
        made.check()
        silent = await health(temporal_client, workflow_id)
        total_signals = await signals(temporal_client, workflow_id)
        # ... and the workflow keeps no silence timer of its own while the collector
        # watches: with no signal and no timer to come, nothing can report again.
        timers = await events(temporal_client, workflow_id, EventType.EVENT_TYPE_TIMER_STARTED)
        out.close()
    assert out.fell_back == 0 and made.stats.accepted == 8
    assert healthy.status == "healthy" and healthy.watched_by_collector
    assert quiet_signals == 1  # eight heartbeats, one Temporal signal
    assert total_signals == 2  # ... and one for the silence
    assert changes == 2 and made.stats.changes == 2 and timers == 0
    assert len(report.calls) == 1
    interruption = report.calls[0][1]
    assert interruption.fault_hint is FaultClass.NODE_LOST
    assert interruption.evidence[0].rule == "node_agent.heartbeat_silence"
    assert silent.status == "silent" and silent.last_seq == 7
    detect_s = arrived - last_beat
    # the agent asks for 2 s; the collector's floor is MIN_SILENCE_THRESHOLD_S (3 s)
    print(f"\nsilence reported {detect_s:.1f} s after the last heartbeat (threshold 3 s)")
    assert detect_s < 3.0 + 3.0


async def test_with_the_collector_gone_the_workflow_watches_silence_itself(
    temporal_client: Client,
) -> None:
    config, report = make_config(), Reported()
    node = "gpu-m"
    workflow_id = node_health_workflow_id(config.cluster.name, node)
    async with worker(temporal_client, config, node, report):
        async with collector(temporal_client, config) as made:
            out = agent_out(temporal_client, config, made, node)
            for seq in range(3):
                await out.heartbeat(beat(node, seq))
                await asyncio.sleep(0.3)
        # the collector is gone (its process died): the agent keeps heartbeating
        for seq in range(3, 12):
            await out.heartbeat(beat(node, seq))
            await asyncio.sleep(0.4)
        assert report.calls == []  # the collector's death did not look like the node's
        state = await health(temporal_client, workflow_id)
        assert out.fell_back > 0 and not state.watched_by_collector
        await report.wait(timeout=15)  # the node dies too: the workflow's own timer
        out.close()
    assert report.calls[0][1].fault_hint is FaultClass.NODE_LOST
