"""Heartbeats to the liveness collector over UDP; everything else (and heartbeats while the
collector does not answer) through another reporter, normally Temporal.

The collector acknowledges each heartbeat it accepts. While acknowledgements keep coming,
heartbeats cost no Temporal action at all. When none came for ``fallback_after_s`` (the
collector is down, restarting, or unreachable), each heartbeat also goes to the fallback
reporter, so the node's health workflow watches silence itself again: the collector being
down never looks like every node dying, and never hides one that does.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Callable

from resurrect.carry_over import carry_over
from resurrect.config import AgentSettings
from resurrect.contracts.node_health import AgentStopped, NodeFindings, NodeHeartbeat
from resurrect.errors import ConfigError
from resurrect.numbers import is_ascii_digits
from resurrect.sensors.liveness.wire import Beat, WireError, load_key, open_ack, seal
from resurrect.sensors.node_agent.reporters import AgentReporter

log = logging.getLogger(__name__)

MAX_UNACKED = 256  # heartbeats whose send time is kept until acknowledged


class CollectorReporter:
    """A :class:`~sensors.node_agent.reporters.AgentReporter` that heartbeats a collector."""

    def __init__(
        self,
        key: bytes,
        address: tuple[str, int],
        *,
        cluster: str,
        fallback: AgentReporter,
        fallback_after_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._key = key
        self._address = address
        self._cluster = cluster
        self._fallback = fallback
        self.fallback_after_s = fallback_after_s
        self._clock = clock
        self.instance = uuid.uuid4().hex
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        self._last_ack = clock()  # a fresh agent assumes the collector is there
        self.acked_seq = -1
        self._sent_seq = -1
        self._reader: asyncio.AbstractEventLoop | None = None
        self.fell_back = 0  # heartbeats also sent to the fallback reporter
        # send times of the heartbeats not yet acknowledged, by seq (bounded)
        self._sent_at: dict[int, float] = {}
        self._acked_sent_at: float | None = None

    @property
    def confirmed_at(self) -> float | None:
        """When (this reporter's clock) the newest heartbeat the controller side took was
        sent: acknowledged by the collector, or delivered through the fallback. A late
        acknowledgement renews nothing past the send time of what it acknowledges."""
        fallback = getattr(self._fallback, "confirmed_at", None)
        times = [t for t in (self._acked_sent_at, fallback) if t is not None]
        return max(times) if times else None

    @property
    def collector_answers(self) -> bool:
        return self._clock() - self._last_ack <= self.fallback_after_s

    def _send(self, beat: Beat) -> None:
        self._sent_seq = max(self._sent_seq, beat.seq)
        self._sent_at[beat.seq] = self._clock()
        while len(self._sent_at) > MAX_UNACKED:
            del self._sent_at[min(self._sent_at)]
        if self._reader is None:  # acknowledgements are read as they arrive
            self._reader = asyncio.get_running_loop()
            self._reader.add_reader(self._sock.fileno(), self._read_acks)
        try:
            self._sock.sendto(seal(self._key, beat), self._address)
        except OSError as exc:  # no route, buffer full: the fallback covers it
            log.debug("liveness: heartbeat not sent: %s", exc)
        self._read_acks()

    def _read_acks(self) -> None:
        while True:
            try:
                data = self._sock.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ICMP port unreachable surfaces here: no collector
                return
            try:
                ack = open_ack(self._key, data)
            except WireError:
                continue
            if ack.instance == self.instance and ack.seq > self.acked_seq:
                self.acked_seq = ack.seq
                self._last_ack = self._clock()
                sent = self._sent_at.get(ack.seq)
                if sent is not None:
                    self._acked_sent_at = max(self._acked_sent_at or sent, sent)
                for seq in [s for s in self._sent_at if s <= ack.seq]:
                    del self._sent_at[seq]

    def _beat(self, beat: NodeHeartbeat, *, stopping: bool = False) -> Beat:
        return carry_over(
            beat, Beat, cluster=self._cluster, instance=self.instance, stopping=stopping
        )

    async def heartbeat(self, beat: NodeHeartbeat) -> None:
        self._send(self._beat(beat))
        if not self.collector_answers:
            if self.fell_back == 0 or self.fell_back % 100 == 0:
                log.warning(
                    "liveness collector %s:%d silent for %.0fs: heartbeating Temporal",
                    *self._address,
                    self._clock() - self._last_ack,
                )
            self.fell_back += 1
            await self._fallback.heartbeat(beat)

    async def findings(self, findings: NodeFindings) -> None:
        await self._fallback.findings(findings)

    async def stopped(self, stopped: AgentStopped) -> None:
        last = NodeHeartbeat(node=stopped.node, seq=self._sent_seq + 1, sent_at=stopped.sent_at)
        self._send(self._beat(last, stopping=True))
        await self._fallback.stopped(stopped)

    def close(self) -> None:
        if self._reader is not None and not self._reader.is_closed():
            self._reader.remove_reader(self._sock.fileno())
        self._reader = None
        self._sock.close()


def parse_address(text: str) -> tuple[str, int]:
    """``"host:port"`` -> ``(IPv4 address, port)``; ConfigError if it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not is_ascii_digits(port) or not 0 < int(port) < 65536:
        raise ConfigError(f"agent.collector must be host:port, got {text!r}")
    try:
        address = socket.gethostbyname(host)
    except OSError as exc:
        raise ConfigError(f"agent.collector: cannot resolve {host!r}: {exc}") from exc
    return address, int(port)


def collector_reporter(
    settings: AgentSettings, *, cluster: str, fallback: AgentReporter
) -> AgentReporter:
    """The agent's reporter when ``agent.collector`` is set."""
    assert settings.collector is not None
    return CollectorReporter(
        load_key(settings.collector_key_file),
        parse_address(settings.collector),
        cluster=cluster,
        fallback=fallback,
        fallback_after_s=settings.collector_fallback_s,
    )
