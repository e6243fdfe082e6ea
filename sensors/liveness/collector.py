"""The liveness collector: hears every agent's heartbeats, keeps one silence deadline per
node, and reports only changes.

Changes (:class:`LivenessChange`) are handed, in order, to ``deliver`` (normally
:class:`sensors.liveness.forward.TemporalForwarder`): ``heard`` when a node (or a new
agent process on it) is first heard, and again every ``refresh_s`` so its health workflow
stays current; ``silent`` when no heartbeat came for the agent's ``silence_threshold_s``;
``back`` when a silent node is heard again. A delivery that fails is retried.

Failing open: a collector knows only the nodes it has heard itself, so a collector that
(re)starts never declares a node silent it has not heard since; when its own loop wakes
much later than asked (the process stalled), every deadline gets a fresh threshold instead
of a verdict; and while it is down the agents get no acknowledgements and fall back to
heartbeating their health workflows directly, which then watch silence themselves.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from resurrect.sensors.liveness.wire import Ack, Beat, WireError, open_beat, seal

log = logging.getLogger(__name__)

STALL_SLACK_S = 3.0
REFRESH_S = 3600.0
MAX_NODES = 200_000

ChangeKind = Literal["heard", "silent", "back"]


@dataclass(frozen=True)
class LivenessChange:
    kind: ChangeKind
    beat: Beat  # the last heartbeat heard from the node
    last_heard_at: datetime
    silent_for_s: float = 0.0


@dataclass
class _Node:
    beat: Beat
    heard: float  # monotonic
    heard_at: datetime
    forwarded: float  # monotonic time of the last change handed on
    silent: bool = False
    version: int = 0


@dataclass
class CollectorStats:
    accepted: int = 0
    refused: int = 0
    changes: int = 0
    refused_reasons: dict[str, int] = field(default_factory=dict)


class LivenessCollector:
    """Authenticates heartbeats (:mod:`.wire`) and turns them into changes."""

    def __init__(
        self,
        key: bytes,
        cluster: str,
        deliver: Callable[[LivenessChange], Awaitable[object]],
        *,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._key = key
        self.cluster = cluster
        self._deliver = deliver
        self.refresh_s = refresh_s
        self._clock = clock
        self._now = now
        self.nodes: dict[str, _Node] = {}
        self._deadlines: list[tuple[float, str, int]] = []
        self._changes: asyncio.Queue[LivenessChange] = asyncio.Queue()
        self._wake = asyncio.Event()
        self.stats = CollectorStats()
        self.transport: asyncio.DatagramTransport | None = None

    # -- hearing ---------------------------------------------------------------------------

    def receive(self, datagram: bytes) -> bytes | None:
        """Handle one datagram; the sealed acknowledgement to send back, or None."""
        try:
            beat = open_beat(self._key, datagram, now=self._now())
            if beat.cluster != self.cluster:
                raise WireError(f"heartbeat for cluster {beat.cluster!r}")
        except WireError as exc:
            self.stats.refused += 1
            reason = str(exc).split(":", 1)[0][:40]
            self.stats.refused_reasons[reason] = self.stats.refused_reasons.get(reason, 0) + 1
            if self.stats.refused in (1, 10, 100, 1000) or self.stats.refused % 10000 == 0:
                log.warning("liveness: refused heartbeat (%d so far): %s", self.stats.refused, exc)
            return None
        node = self.nodes.get(beat.node)
        if node is not None and node.beat.instance == beat.instance and beat.seq <= node.beat.seq:
            self.stats.refused += 1  # a replay, or reordered: it proves nothing new
            return None
        self.stats.accepted += 1
        self._hear(beat, node)
        return seal(self._key, Ack(node=beat.node, instance=beat.instance, seq=beat.seq))

    def _hear(self, beat: Beat, node: _Node | None) -> None:
        now, at = self._clock(), self._now()
        if beat.stopping:
            self.nodes.pop(beat.node, None)  # stops on purpose: nothing to watch
            return
        if node is None:
            if len(self.nodes) >= MAX_NODES:
                return
            node = _Node(beat=beat, heard=now, heard_at=at, forwarded=now)
            self.nodes[beat.node] = node
            self._change(LivenessChange("heard", beat, at))
        else:
            new_instance = node.beat.instance != beat.instance
            was_silent = node.silent
            node.beat, node.heard, node.heard_at, node.silent = beat, now, at, False
            if was_silent:
                node.forwarded = now
                self._change(LivenessChange("back", beat, at))
            elif new_instance or now - node.forwarded >= self.refresh_s:
                node.forwarded = now
                self._change(LivenessChange("heard", beat, at))
        node.version += 1
        heapq.heappush(self._deadlines, (now + beat.silence_threshold_s, beat.node, node.version))
        if len(self._deadlines) > 4 * max(len(self.nodes), 1024):
            self._compact_deadlines()

    def _compact_deadlines(self) -> None:
        self._deadlines = [
            (n.heard + n.beat.silence_threshold_s, name, n.version)
            for name, n in self.nodes.items()
        ]
        heapq.heapify(self._deadlines)

    def _change(self, change: LivenessChange) -> None:
        self.stats.changes += 1
        self._changes.put_nowait(change)

    # -- deciding silence --------------------------------------------------------------------

    def check(self, planned: float | None = None) -> float | None:
        """Declare silent every node past its deadline; the next deadline (or None).

        ``planned``: when this check was meant to run; a check much later than that means
        this process stalled, and every node gets a fresh threshold instead of a verdict."""
        now = self._clock()
        if planned is not None and now - planned > STALL_SLACK_S:
            log.warning("liveness: collector stalled %.1fs; silence timers restart", now - planned)
            for n in self.nodes.values():
                n.heard = now
                n.version += 1
            self._compact_deadlines()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, name, version = heapq.heappop(self._deadlines)
            node = self.nodes.get(name)
            if node is None or node.version != version or node.silent:
                continue
            node.silent = True
            node.forwarded = now
            silent_for = now - node.heard
            self._change(LivenessChange("silent", node.beat, node.heard_at, silent_for))
            log.warning("liveness: %s silent for %.1fs", name, silent_for)
        return self._deadlines[0][0] if self._deadlines else None

    async def watch(self, stop: asyncio.Event, *, max_sleep_s: float = 1.0) -> None:
        """Check at each node's deadline (at most ``max_sleep_s`` apart)."""
        while not stop.is_set():
            planned = self._clock()
            upcoming = self.check(planned)
            delay = max_sleep_s if upcoming is None else min(max_sleep_s, upcoming - planned)
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.01, delay))
            except TimeoutError:
                pass

    async def forward(self, stop: asyncio.Event, *, retry_s: float = 1.0) -> None:
        """Hand every change to ``deliver``, in order; a failed delivery is retried."""
        while not stop.is_set():
            getter = asyncio.ensure_future(self._changes.get())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if not getter.done():
                getter.cancel()
                return
            change = getter.result()
            while not stop.is_set():
                try:
                    await self._deliver(change)
                    break
                except Exception:  # Temporal away: keep the change, try again
                    log.exception(
                        "liveness: cannot deliver %s of %s", change.kind, change.beat.node
                    )
                    await asyncio.sleep(retry_s)

    # -- the socket ----------------------------------------------------------------------------

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        """Open the UDP socket; the address it is bound to."""
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Protocol(self), local_addr=(host, port)
        )
        self.transport = transport
        bound = transport.get_extra_info("sockname")
        return str(bound[0]), int(bound[1])

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    async def run(self, stop: asyncio.Event, host: str, port: int) -> None:
        await self.listen(host, port)
        try:
            await asyncio.gather(self.watch(stop), self.forward(stop))
        finally:
            self.close()


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, collector: LivenessCollector) -> None:
        self.collector = collector
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a datagram transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        ack = self.collector.receive(data)
        if ack is not None and self.transport is not None:
            self.transport.sendto(ack, addr)
