"""The liveness collector and the agent's collector reporter, without Temporal: only
authentic heartbeats count, only changes are handed on, and a collector that is down,
restarting or stalled never makes nodes look dead."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.clock import Clock
from support.liveness import NOW, beat

from resurrect.cli import main
from resurrect.contracts.node_health import (
    HEARTBEAT_SIGNAL,
    NODE_SILENT_SIGNAL,
    AgentStopped,
    NodeFindings,
    NodeHeartbeat,
    NodeSilent,
)
from resurrect.errors import ConfigError
from resurrect.sensors.liveness.collector import STALL_SLACK_S, LivenessChange, LivenessCollector
from resurrect.sensors.liveness.forward import change_signal
from resurrect.sensors.liveness.wire import (
    Ack,
    Beat,
    WireError,
    load_key,
    node_key,
    open_ack,
    open_beat,
    seal,
)
from resurrect.sensors.node_agent.collector_reporter import CollectorReporter, parse_address

KEY = b"k" * 32  # the collector's master key


def key_of(node: str) -> bytes:
    """The key the collector derives for ``node``."""
    return node_key(KEY, "c", node)


def sealed(message: Beat) -> bytes:
    """``message`` sealed as its node's agent does: under that node's key."""
    return seal(node_key(KEY, "c", message.node), message)


def collector(clock: Clock, **kwargs: object) -> tuple[LivenessCollector, list[LivenessChange]]:
    changes: list[LivenessChange] = []

    async def deliver(change: LivenessChange) -> None:
        changes.append(change)

    made = LivenessCollector(KEY, "c", deliver, clock=clock, now=lambda: NOW, **kwargs)  # type: ignore[arg-type]
    return made, changes


def drain(made: LivenessCollector) -> list[LivenessChange]:
    out = []
    while not made._changes.empty():
        out.append(made._changes.get_nowait())
    return out


# -- the wire -----------------------------------------------------------------------------


def test_a_sealed_heartbeat_opens_with_the_key_only() -> None:
    data = sealed(beat())
    assert open_beat(key_of, data, now=NOW).node == "n1"
    with pytest.raises(WireError, match="bad MAC"):
        open_beat(lambda _node: b"x" * 32, data, now=NOW)


@pytest.mark.parametrize(
    "forged",
    [
        b"",
        b"no mac at all",
        sealed(beat()).replace(b'"n1"', b'"n2"'),  # body changed after sealing
        sealed(beat())[:-1] + b"0",
        beat().model_dump_json().encode() + b"\n" + b"0" * 64,
        b"x" * 5000,
    ],
)
def test_forged_or_damaged_heartbeats_are_refused(forged: bytes) -> None:
    with pytest.raises(WireError):
        open_beat(key_of, forged, now=NOW)


def test_a_heartbeat_from_a_skewed_clock_is_refused() -> None:
    data = sealed(beat(sent_at=NOW - timedelta(minutes=5)))
    with pytest.raises(WireError, match="skew"):
        open_beat(key_of, data, now=NOW)


def test_acknowledgements_are_sealed_too() -> None:
    ack = Ack(node="n1", instance="a", seq=3)
    assert open_ack(KEY, seal(KEY, ack)) == ack
    with pytest.raises(WireError):
        open_ack(b"y" * 32, seal(KEY, ack))


def test_the_key_file_must_be_private_owned_and_long(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes(os.urandom(48).hex().encode())
    path.chmod(0o600)
    assert len(load_key(path)) == 96
    path.chmod(0o400)
    assert len(load_key(path)) == 96
    for mode in (0o640, 0o604, 0o660):  # group-readable was accepted before
        path.chmod(mode)
        with pytest.raises(ConfigError, match="chmod 600"):
            load_key(path)
    path.chmod(0o600)
    if os.geteuid() == 0:  # nobody's file: not ours, not root's
        os.chown(path, 65534, 65534)
        with pytest.raises(ConfigError, match="owned by uid 65534"):
            load_key(path)
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(ConfigError):
        load_key(link)
    short = tmp_path / "short"
    short.write_bytes(b"abc")
    short.chmod(0o600)
    with pytest.raises(ConfigError, match="shorter"):
        load_key(short)
    with pytest.raises(ConfigError):
        load_key(tmp_path / "missing")


def test_each_node_has_its_own_key() -> None:
    keys = {node_key(KEY, "c", n) for n in ("n1", "n2")} | {node_key(KEY, "d", "n1")}
    assert len(keys) == 3 and all(len(k) == 64 for k in keys)
    data = sealed(beat("n1"))
    assert open_beat(key_of, data, now=NOW).node == "n1"
    # n2's agent seals a heartbeat for n1 with its own key: refused
    forged = seal(node_key(KEY, "c", "n2"), beat("n1"))
    with pytest.raises(WireError, match="bad MAC"):
        open_beat(key_of, forged, now=NOW)
    # ... or names itself on the line and n1 in the heartbeat: refused
    relabelled = seal(node_key(KEY, "c", "n2"), beat("n1")).replace(b"n1\n", b"n2\n", 1)
    with pytest.raises(WireError):
        open_beat(key_of, relabelled, now=NOW)


# -- the collector ------------------------------------------------------------------------


def test_only_changes_are_handed_on() -> None:
    clock = Clock()
    made, _ = collector(clock)
    assert made.receive(sealed(beat(seq=0))) is not None
    for seq in range(1, 30):
        clock.now += 2.0
        assert made.receive(sealed(beat(seq=seq))) is not None
        made.check()
    assert [c.kind for c in drain(made)] == ["heard"]
    clock.now += 5.9
    made.check()
    assert drain(made) == []
    clock.now += 0.2
    made.check()
    [silent] = drain(made)
    assert silent.kind == "silent" and silent.beat.seq == 29 and silent.silent_for_s >= 6.0
    clock.now += 60
    made.check()
    assert drain(made) == []  # once per silent spell
    made.receive(sealed(beat(seq=30)))
    assert [c.kind for c in drain(made)] == ["back"]


def test_forged_replayed_and_foreign_heartbeats_change_nothing() -> None:
    clock = Clock()
    made, _ = collector(clock)
    made.receive(sealed(beat(seq=5)))
    drain(made)
    clock.now += 5.0
    assert made.receive(sealed(beat(seq=5))) is None  # a replay
    assert made.receive(sealed(beat(seq=4))) is None
    assert made.receive(seal(b"z" * 32, beat(seq=9))) is None  # forged
    assert made.receive(sealed(beat(seq=9, cluster="other"))) is None
    assert made.receive(sealed(beat("n9", seq=1)).replace(b"n9", b"n8")) is None
    clock.now += 1.5
    made.check()
    assert [c.kind for c in drain(made)] == ["silent"]  # none of them kept n1 alive
    assert made.stats.refused == 5 and "n8" not in made.nodes


def test_a_new_agent_process_and_the_hourly_refresh_are_handed_on() -> None:
    clock = Clock()
    made, _ = collector(clock, refresh_s=3600.0)
    made.receive(sealed(beat(seq=100)))
    made.receive(sealed(beat(seq=0, instance="b")))  # restarted agent: seq starts over
    for seq in range(1, 1801):
        clock.now += 2.0
        made.receive(sealed(beat(seq=seq, instance="b")))
    assert [c.kind for c in drain(made)] == ["heard", "heard", "heard"]


def test_a_deliberate_stop_is_not_silence() -> None:
    clock = Clock()
    made, _ = collector(clock)
    made.receive(sealed(beat(seq=0)))
    made.receive(sealed(beat(seq=1, stopping=True)))
    clock.now += 100
    made.check()
    assert [c.kind for c in drain(made)] == ["heard"]


def test_a_restarted_collector_declares_no_node_it_has_not_heard() -> None:
    clock = Clock()
    first, _ = collector(clock)
    for node in ("n1", "n2", "n3"):
        first.receive(sealed(beat(node)))
    clock.now += 30  # the collector was down for 30 s; a new one starts
    second, _ = collector(clock)
    clock.now += 60
    assert second.check() is None and drain(second) == []
    second.receive(sealed(beat("n2", seq=7)))
    clock.now += 7
    second.check()
    assert [(c.kind, c.beat.node) for c in drain(second)] == [("heard", "n2"), ("silent", "n2")]


def test_a_stalled_collector_gives_every_node_a_fresh_threshold() -> None:
    clock = Clock()
    made, _ = collector(clock)
    made.receive(sealed(beat()))
    drain(made)
    planned = clock.now
    clock.now += 6.0 + STALL_SLACK_S + 1  # the process did not run for a while
    made.check(planned)
    assert drain(made) == []
    clock.now += 6.1
    made.check(clock.now)
    assert [c.kind for c in drain(made)] == ["silent"]


async def test_a_failed_delivery_is_retried_in_order() -> None:
    delivered: list[str] = []
    failures = [True, False, False]

    async def flaky(change: LivenessChange) -> None:
        if failures.pop(0):
            raise RuntimeError("temporal away")
        delivered.append(change.kind)

    clock = Clock()
    made = LivenessCollector(KEY, "c", flaky, clock=clock, now=lambda: NOW)
    made.receive(sealed(beat()))
    clock.now += 7
    made.check()
    stop = asyncio.Event()
    task = asyncio.create_task(made.forward(stop, retry_s=0.01))
    while len(delivered) < 2:
        await asyncio.sleep(0.01)
    stop.set()
    await task
    assert delivered == ["heard", "silent"]


def test_changes_become_the_health_workflow_signals() -> None:
    heard = LivenessChange("heard", beat(seq=3, gpus=8), NOW)
    name, payload = change_signal(heard)
    assert name == HEARTBEAT_SIGNAL and isinstance(payload, NodeHeartbeat)
    assert payload.watched_by_collector and payload.seq == 3 and payload.gpus == 8
    name, payload = change_signal(LivenessChange("silent", beat(seq=4), NOW, 6.5))
    assert name == NODE_SILENT_SIGNAL and isinstance(payload, NodeSilent)
    assert payload.last_heartbeat_at == NOW and payload.silent_for_s == 6.5


# -- the agent's side ---------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.beats: list[NodeHeartbeat] = []
        self.other: list[object] = []

    async def heartbeat(self, beat: NodeHeartbeat) -> None:
        self.beats.append(beat)

    async def findings(self, findings: NodeFindings) -> None:
        self.other.append(findings)

    async def stopped(self, stopped: AgentStopped) -> None:
        self.other.append(stopped)


def node_beat(seq: int) -> NodeHeartbeat:
    return NodeHeartbeat(node="n1", seq=seq, sent_at=datetime.now(UTC))


@asynccontextmanager
async def agent_and_collector(
    fallback_after_s: float, *, collector_key: bytes = KEY
) -> AsyncIterator[tuple[LivenessCollector, CollectorReporter, Recorder]]:
    """A collector (key ``collector_key``) on a free local port, and node n1's agent (key
    ``KEY``) heartbeating to it, falling back to a recorder (for Temporal) after
    ``fallback_after_s`` without an acknowledgement."""
    made = LivenessCollector(collector_key, "c", Recorder().heartbeat)  # type: ignore[arg-type]
    host, port = await made.listen("127.0.0.1", 0)
    fallback = Recorder()
    out = CollectorReporter(
        node_key(KEY, "c", "n1"),
        (host, port),
        cluster="c",
        fallback=fallback,
        fallback_after_s=fallback_after_s,
    )
    try:
        yield made, out, fallback
    finally:
        out.close()
        made.close()


async def test_heartbeats_reach_a_live_collector_and_not_temporal() -> None:
    async with agent_and_collector(0.3) as (made, out, fallback):
        for seq in range(6):
            await out.heartbeat(node_beat(seq))
            await asyncio.sleep(0.1)
        assert made.stats.accepted == 6 and out.acked_seq == 5
        assert fallback.beats == []
        await out.stopped(AgentStopped(node="n1", sent_at=datetime.now(UTC)))
        await asyncio.sleep(0.05)
        assert "n1" not in made.nodes and len(fallback.other) == 1


async def test_with_the_collector_down_heartbeats_fall_back_to_temporal() -> None:
    async with agent_and_collector(0.2) as (made, out, fallback):
        made.close()  # nobody listens there any more
        await out.heartbeat(node_beat(0))
        assert fallback.beats == []  # a fresh agent gives the collector its chance
        await asyncio.sleep(0.3)
        await out.heartbeat(node_beat(1))
        await out.heartbeat(node_beat(2))
        assert [b.seq for b in fallback.beats] == [1, 2]
        assert not any(b.watched_by_collector for b in fallback.beats)


async def test_acknowledgements_under_another_key_do_not_count() -> None:
    async with agent_and_collector(0.2, collector_key=b"q" * 32) as (made, out, fallback):
        for seq in range(4):
            await out.heartbeat(node_beat(seq))
            await asyncio.sleep(0.1)
        assert made.stats.refused == 4 and out.acked_seq == -1
        assert fallback.beats  # the agent fell back


def test_collector_addresses() -> None:
    assert parse_address("127.0.0.1:7470") == ("127.0.0.1", 7470)
    for bad in ("nohost", ":7470", "h:0", "h:x"):
        with pytest.raises(ConfigError):
            parse_address(bad)


def test_liveness_key_writes_a_nodes_own_key(tmp_path: Path) -> None:
    master = tmp_path / "master.key"
    master.write_bytes(KEY)
    master.chmod(0o600)
    config = tmp_path / "config.yaml"
    config.write_text(f"cluster: {{name: c}}\nliveness: {{key_file: {master}}}\n")
    out = tmp_path / "n1.key"
    assert main(["liveness-key", "-c", str(config), "n1", "--out", str(out)]) == 0
    assert out.stat().st_mode & 0o777 == 0o600
    assert load_key(out) == node_key(KEY, "c", "n1")
