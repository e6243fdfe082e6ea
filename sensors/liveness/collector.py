"""The liveness collector: hears every agent's heartbeats, keeps one silence deadline per
node, and reports only changes.

Changes (:class:`LivenessChange`) are handed, in order, to ``deliver`` (normally
:class:`sensors.liveness.forward.TemporalForwarder`): ``heard`` when a node (or a new
agent process on it) is first heard, and again every ``refresh_s`` so its health workflow
stays current; ``silent`` when no heartbeat came for the agent's ``silence_threshold_s``;
``back`` when a silent node is heard again. A delivery that fails is retried.

Each agent process (its ``instance``) of a node has its own deadline; the node is silent
only when every instance heard is: a heartbeat of one instance (a new one, or one that says
it stops) never shortens another's deadline. A threshold below
:data:`MIN_SILENCE_THRESHOLD_S` is raised to it, and a sequence number more than
:func:`max_seq_step` ahead of its instance's last is refused, so a replayed instance id with
a huge ``seq`` cannot make the collector refuse the live agent's later heartbeats.

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

from resurrect.sensors.liveness.wire import (
    MAX_SKEW_S,
    Ack,
    Beat,
    WireError,
    node_key,
    open_beat,
    seal,
)

log = logging.getLogger(__name__)

STALL_SLACK_S = 3.0
REFRESH_S = 3600.0
MAX_NODES = 200_000
MIN_SILENCE_THRESHOLD_S = 3.0
MAX_INSTANCES = 4  # agent processes remembered per node (an agent restart makes a new one)
SEQ_SLACK = 64
MAX_BEATS_PER_S = 20.0


def max_seq_step(elapsed_s: float) -> float:
    """How far an instance's ``seq`` may move ahead ``elapsed_s`` after its last accepted
    heartbeat (heartbeats lost on the way, at most MAX_BEATS_PER_S of them a second)."""
    return SEQ_SLACK + max(0.0, elapsed_s) * MAX_BEATS_PER_S


ChangeKind = Literal["heard", "silent", "back"]


@dataclass(frozen=True)
class LivenessChange:
    kind: ChangeKind
    beat: Beat  # the last heartbeat heard from the node
    last_heard_at: datetime
    silent_for_s: float = 0.0


@dataclass
class _Instance:
    """One agent process of a node."""

    seq: int
    heard: float  # monotonic
    threshold_s: float

    @property
    def deadline(self) -> float:
        return self.heard + self.threshold_s


@dataclass
class _Node:
    beat: Beat  # the last heartbeat accepted from the node
    heard: float  # monotonic
    heard_at: datetime
    forwarded: float  # monotonic time of the last change handed on
    key: bytes = b""  # the node's key (derived from the master once)
    instances: dict[str, _Instance] = field(default_factory=dict)
    silent: bool = False
    version: int = 0

    @property
    def deadline(self) -> float:
        """The latest deadline of its instances: each one alive keeps the node alive."""
        if len(self.instances) == 1:
            return next(iter(self.instances.values())).deadline
        return max((i.deadline for i in self.instances.values()), default=self.heard)

    def forget_gone(self, now: float) -> None:
        """Drop instances silent for long (their heartbeats are past the clock-skew
        window, so none could be replayed), then the earliest beyond MAX_INSTANCES."""
        for name, instance in list(self.instances.items()):
            if instance.deadline < now - 2 * MAX_SKEW_S:
                del self.instances[name]
        while len(self.instances) > MAX_INSTANCES:
            earliest = min(self.instances, key=lambda n: self.instances[n].deadline)
            del self.instances[earliest]


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
        self._key = key  # the master key: every node's key derives from it
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

    def _node_key(self, node: str) -> bytes:
        known = self.nodes.get(node)
        return known.key if known is not None else node_key(self._key, self.cluster, node)

    def _refuse(self, reason: str, detail: object) -> None:
        self.stats.refused += 1
        self.stats.refused_reasons[reason] = self.stats.refused_reasons.get(reason, 0) + 1
        if self.stats.refused in (1, 10, 100, 1000) or self.stats.refused % 10000 == 0:
            log.warning("liveness: refused heartbeat (%d so far): %s", self.stats.refused, detail)

    def receive(self, datagram: bytes) -> bytes | None:
        """Handle one datagram; the sealed acknowledgement to send back, or None."""
        try:
            beat = open_beat(self._node_key, datagram, now=self._now())
            if beat.cluster != self.cluster:
                raise WireError(f"heartbeat for cluster {beat.cluster!r}")
        except WireError as exc:
            self._refuse(str(exc).split(":", 1)[0][:40], exc)
            return None
        node = self.nodes.get(beat.node)
        instance = node.instances.get(beat.instance) if node is not None else None
        if instance is not None:
            if beat.seq <= instance.seq:
                self._refuse("replay", f"{beat.node}: seq {beat.seq} already heard")
                return None  # a replay, or reordered: it proves nothing new
            if beat.seq - instance.seq > max_seq_step(self._clock() - instance.heard):
                self._refuse("seq jump", f"{beat.node}: seq {instance.seq} -> {beat.seq}")
                return None
        self.stats.accepted += 1
        self._hear(beat, node)
        key = self._node_key(beat.node)  # kept with the node from now on
        return seal(key, Ack(node=beat.node, instance=beat.instance, seq=beat.seq))

    def _hear(self, beat: Beat, node: _Node | None) -> None:
        now, at = self._clock(), self._now()
        if beat.silence_threshold_s < MIN_SILENCE_THRESHOLD_S:
            beat = beat.model_copy(update={"silence_threshold_s": MIN_SILENCE_THRESHOLD_S})
        if beat.stopping:  # this agent process stops on purpose: its silence is no fault
            if node is not None:
                node.instances.pop(beat.instance, None)
                if not node.instances:
                    self.nodes.pop(beat.node, None)  # nothing left to watch
                    return
                self._push_deadline(beat.node, node)
            return
        if node is None:
            if len(self.nodes) >= MAX_NODES:
                return
            key = node_key(self._key, self.cluster, beat.node)
            node = _Node(beat=beat, heard=now, heard_at=at, forwarded=now, key=key)
            node.instances[beat.instance] = _Instance(beat.seq, now, beat.silence_threshold_s)
            self.nodes[beat.node] = node
            self._change(LivenessChange("heard", beat, at))
        else:
            instance = node.instances.get(beat.instance)
            new_instance = instance is None
            if instance is None:
                node.instances[beat.instance] = _Instance(beat.seq, now, beat.silence_threshold_s)
                node.forget_gone(now)
            else:
                instance.seq, instance.heard = beat.seq, now
                instance.threshold_s = beat.silence_threshold_s
            was_silent = node.silent
            node.beat, node.heard, node.heard_at, node.silent = beat, now, at, False
            if was_silent:
                node.forwarded = now
                self._change(LivenessChange("back", beat, at))
            elif new_instance or now - node.forwarded >= self.refresh_s:
                node.forwarded = now
                self._change(LivenessChange("heard", beat, at))
        self._push_deadline(beat.node, node)

    def _push_deadline(self, name: str, node: _Node) -> None:
        node.version += 1
        heapq.heappush(self._deadlines, (node.deadline, name, node.version))
        if len(self._deadlines) > 4 * max(len(self.nodes), 1024):
            self._compact_deadlines()

    def _compact_deadlines(self) -> None:
        self._deadlines = [(n.deadline, name, n.version) for name, n in self.nodes.items()]
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
                for instance in n.instances.values():
                    instance.heard = now
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
