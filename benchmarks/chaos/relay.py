"""A UDP relay between the node agents and the liveness collector, with a switch that drops
every datagram both ways while it is on: the soak's "liveness datagrams dropped" fault (the
kernel here has no netem qdisc to drop them on the loopback device)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


class _Upstream(asyncio.DatagramProtocol):
    """One agent's path to the collector: answers go back to that agent."""

    def __init__(self, relay: LivenessRelay, client: tuple[str, int]) -> None:
        self.relay = relay
        self.client = client

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if not self.relay.dropping and self.relay.front is not None:
            self.relay.front.sendto(data, self.client)
        else:
            self.relay.dropped += 1


class LivenessRelay(asyncio.DatagramProtocol):
    """Listens on ``(host, port)`` and forwards to ``target``; ``dropping`` drops."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.dropping = False
        self.dropped = 0
        self.front: asyncio.DatagramTransport | None = None
        self._upstreams: dict[tuple[str, int], asyncio.DatagramTransport] = {}
        self._pending: set[asyncio.Task[None]] = set()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=(host, port))
        self.front = transport
        return int(transport.get_extra_info("sockname")[1])

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if self.dropping:
            self.dropped += 1
            return
        client = (str(addr[0]), int(addr[1]))
        upstream = self._upstreams.get(client)
        if upstream is not None:
            upstream.sendto(data)
            return
        task = asyncio.get_running_loop().create_task(self._open(client, data))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _open(self, client: tuple[str, int], first: bytes) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Upstream(self, client), remote_addr=self.target
        )
        self._upstreams[client] = transport
        transport.sendto(first)

    def close(self) -> None:
        for transport in self._upstreams.values():
            with contextlib.suppress(Exception):
                transport.close()
        if self.front is not None:
            self.front.close()
