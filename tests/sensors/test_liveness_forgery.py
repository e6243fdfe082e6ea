"""Issue 20, attack 5: one forged datagram silenced a live node.

Every agent held the one shared liveness key, so root on any node could seal heartbeats for
every node: replaying a live agent's instance id (sent in clear) with ``seq=10**15`` made
the collector refuse every later genuine heartbeat, and a heartbeat with a new instance id
and ``silence_threshold_s=0.001`` had the node declared silent at the next check.

Now each agent holds only its own node's key (derived from a master only the collector
holds), a ``seq`` may not jump far ahead, each agent instance keeps its own deadline, and
thresholds have a floor. Each test performs the attack, then shows the live agent's node
stays alive (no ``silent`` change) and its genuine heartbeats are still accepted; the
refusal is counted with its reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.clock import Clock
from support.liveness import CLUSTER, NOW, beat

from resurrect.errors import ConfigError
from resurrect.sensors.liveness.collector import (
    MIN_SILENCE_THRESHOLD_S,
    LivenessChange,
    LivenessCollector,
)
from resurrect.sensors.liveness.wire import load_key, node_key, seal

MASTER = os.urandom(32).hex().encode()


async def _ignore(change: LivenessChange) -> None:
    return None


def live_collector(clock: Clock) -> LivenessCollector:
    return LivenessCollector(MASTER, CLUSTER, _ignore, clock=clock, now=lambda: NOW)


def agent_key_file(tmp_path: Path, node: str) -> Path:
    """The key file on ``node``, as ``resurrect liveness-key`` writes it."""
    path = tmp_path / f"{node}.key"
    path.write_bytes(node_key(MASTER, CLUSTER, node) + b"\n")
    path.chmod(0o600)
    return path


def kinds(made: LivenessCollector) -> list[str]:
    out = []
    while not made._changes.empty():
        out.append(made._changes.get_nowait().kind)
    return out


class LiveAgent:
    """n1's agent: one heartbeat every 2 s under its own key."""

    def __init__(self, made: LivenessCollector, clock: Clock, key: bytes) -> None:
        self.made, self.clock, self.key, self.seq = made, clock, key, 0

    def beats(self, count: int) -> int:
        """Send ``count`` heartbeats 2 s apart, checking silence between; how many were
        acknowledged."""
        acked = 0
        for _ in range(count):
            self.clock.now += 2.0
            self.made.check()
            self.seq += 1
            acked += self.made.receive(seal(self.key, beat("n1", self.seq))) is not None
        return acked


@pytest.fixture
def agent(tmp_path: Path) -> LiveAgent:
    """n1's agent under n1's own key, heard three times by a fresh collector."""
    clock = Clock()
    live = LiveAgent(live_collector(clock), clock, load_key(agent_key_file(tmp_path, "n1")))
    live.beats(3)
    return live


def test_root_on_another_node_cannot_speak_for_this_one(agent: LiveAgent, tmp_path: Path) -> None:
    made = agent.made
    stolen = load_key(agent_key_file(tmp_path, "n2"))  # root on n2 reads n2's key
    # the attack: n1's instance id with a huge seq, a tiny threshold, a stop
    for forged in (
        beat("n1", 10**15),
        beat("n1", 99, instance="evil", silence_threshold_s=0.001),
        beat("n1", 99, stopping=True),
    ):
        assert made.receive(seal(stolen, forged)) is None
    assert made.stats.refused_reasons == {"bad MAC": 3}
    assert agent.beats(10) == 10  # every genuine heartbeat is still accepted
    assert kinds(made) == ["heard"]  # and n1 was never silent


def test_a_replayed_instance_id_with_a_huge_seq_is_refused(agent: LiveAgent) -> None:
    """Even under n1's own key (root on n1), a huge jump is refused and blocks nothing."""
    made = agent.made
    assert made.receive(seal(agent.key, beat("n1", 10**15))) is None
    assert made.stats.refused_reasons == {"seq jump": 1}
    assert agent.beats(10) == 10
    assert kinds(made) == ["heard"]


def test_a_new_instance_with_a_tiny_threshold_shortens_no_deadline(agent: LiveAgent) -> None:
    made, clock, key = agent.made, agent.clock, agent.key
    forged = beat("n1", 0, instance="evil", silence_threshold_s=0.001)
    assert made.receive(seal(key, forged)) is not None  # n1's own key: heard, as a claim
    clock.now += MIN_SILENCE_THRESHOLD_S - 0.5  # past the forged threshold, not the floor
    made.check()
    clock.now += 1.0  # past the floor: the forged instance is silent, the live one is not
    made.check()
    assert "silent" not in kinds(made)
    made.receive(seal(key, beat("n1", 1, instance="evil", stopping=True)))
    assert agent.beats(5) == 5  # a stop of another instance leaves n1 watched and alive
    assert "n1" in made.nodes and "silent" not in kinds(made)
    clock.now += 6.1  # the live agent really stops: now n1 is silent
    made.check()
    assert kinds(made) == ["silent"]


@pytest.mark.parametrize("mode", [0o640, 0o660, 0o644])
def test_a_key_file_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = agent_key_file(tmp_path, "n1")
    path.chmod(mode)  # group-readable was accepted before
    with pytest.raises(ConfigError, match=f"mode {mode:04o}"):
        load_key(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_key_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = agent_key_file(tmp_path, "n1")
    os.chown(path, 65534, 65534)
    with pytest.raises(ConfigError, match="not by this user"):
        load_key(path)


def test_a_beat_whose_time_has_no_zone_is_refused_not_a_crash() -> None:
    """Found by benchmarks/fuzz_untrusted_input.py: a key holder's beat with a naive
    ``sent_at`` used to raise TypeError past the collector's WireError handler."""
    import hashlib
    import hmac

    from resurrect.sensors.liveness.wire import WireError, open_beat

    key = b"k" * 32
    body = (
        b'{"kind": "beat", "cluster": "c", "node": "n1", "instance": "i-1", "seq": 1,'
        b' "sent_at": "2026-12-01T15:00:00"}'
    )
    signed = b"n1\n" + body
    datagram = signed + b"\n" + hmac.new(key, signed, hashlib.sha256).hexdigest().encode()
    with pytest.raises(WireError, match="not a heartbeat"):
        open_beat(lambda node: key, datagram)
