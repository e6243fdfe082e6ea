"""Push hooks for the Slurm watcher: a kick makes it poll now instead of at its next tick.

Slurm can run a program when something happens: ``strigger --set --node --down
--program=...`` (a node went down) and ``JobCompType=jobcomp/script`` (a job ended). Point
both at ``deploy/hooks/kick-watcher.sh``, which sends one datagram to the watcher's UNIX
socket (``watcher.kick_socket``). The datagram carries nothing the watcher trusts: it only
triggers a poll, and the poll reads the truth from Slurm. Hooks fail open: if resurrect is
down, the kick is lost and Slurm goes on undisturbed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

MAX_DATAGRAM = 256


class _KickProtocol(asyncio.DatagramProtocol):
    def __init__(self, on_kick: Callable[[str], None]) -> None:
        self.on_kick = on_kick

    def datagram_received(self, data: bytes, addr: object) -> None:
        reason = data[:MAX_DATAGRAM].decode("utf-8", "replace").strip() or "kick"
        self.on_kick("".join(ch if ch.isprintable() else "?" for ch in reason))


class KickListener:
    """Listens on a UNIX datagram socket and calls ``on_kick`` for every datagram."""

    def __init__(self, path: Path, on_kick: Callable[[str], None]) -> None:
        self.path = path
        self.on_kick = on_kick
        self._transport: asyncio.BaseTransport | None = None

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(self.path))
        # Any hook may kick (Slurm runs them as SlurmUser); a kick only triggers a poll,
        # and the watcher rate-limits polls.
        os.chmod(self.path, 0o666)  # noqa: S103
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(
            lambda: _KickProtocol(self.on_kick), sock=sock
        )
        log.info("watcher kick socket: %s", self.path)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def send_kick(path: Path, reason: str = "kick") -> bool:
    """Send one kick; False (never an exception) when nobody listens."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(reason.encode("utf-8", "replace")[:MAX_DATAGRAM], str(path))
        return True
    except OSError:
        return False
