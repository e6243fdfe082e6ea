"""Push hooks for the Slurm watcher: a kick makes it poll now instead of at its next tick.

Slurm can run a program when something happens: ``strigger --set --node --down
--program=...`` (a node went down) and ``JobCompType=jobcomp/script`` (a job ended). Point
both at ``deploy/hooks/kick-watcher.sh``, which sends one datagram to the watcher's UNIX
socket (``watcher.kick_socket``, default :data:`resurrect.config.DEFAULT_KICK_SOCKET`,
``/run/resurrect/kick.sock``: the hook script has the same default, and the watch unit
creates ``/run/resurrect`` with ``RuntimeDirectory=``). The datagram carries nothing the
watcher trusts: it only triggers a poll, and the poll reads the truth from Slurm. Hooks fail
open: if resurrect is down, the kick is lost and Slurm goes on undisturbed.

The socket is created without trusting its path: its directory must be a real directory
(not a symlink) owned by this process's user and writable by nobody else (created 0755 if
missing); the socket is bound inside a private temporary directory, given its mode there
and renamed into place, so no ``chmod`` ever resolves a path someone else could swap for a
symlink. Anything else is refused with :class:`KickSocketError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from resurrect.errors import ResurrectError

log = logging.getLogger(__name__)

MAX_DATAGRAM = 256
# Any Slurm hook may kick (they run as SlurmUser); a kick only triggers a rate-limited poll.
SOCKET_MODE = 0o666
DIR_MODE = 0o755


class KickSocketError(ResurrectError):
    """The kick socket cannot be created safely where it was asked for."""


def _checked_directory(directory: Path) -> None:
    """``directory`` exists, is a real directory of ours, and only we can write in it."""
    try:
        os.mkdir(directory, DIR_MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise KickSocketError(f"cannot create {directory}: {exc.strerror or exc}") from exc
    info = os.lstat(directory)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise KickSocketError(f"{directory} is not a directory (a symlink?): refusing it")
    if info.st_uid != os.geteuid():
        raise KickSocketError(
            f"{directory} belongs to uid {info.st_uid}, not to us (uid {os.geteuid()})"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise KickSocketError(f"{directory} is writable by others (mode {info.st_mode & 0o777:o})")


def bind_kick_socket(path: Path) -> socket.socket:
    """A datagram socket bound at ``path`` with mode :data:`SOCKET_MODE`, created safely."""
    _checked_directory(path.parent)
    with contextlib.suppress(FileNotFoundError):
        existing = os.lstat(path)
        if not stat.S_ISSOCK(existing.st_mode):
            raise KickSocketError(f"{path} exists and is not a socket: refusing to replace it")
    private = Path(tempfile.mkdtemp(prefix=".kick-", dir=path.parent))  # 0700, ours
    staged = private / "s"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(str(staged))
        os.chmod(staged, SOCKET_MODE)  # inside our private 0700 directory: no swap possible
        os.rename(staged, path)  # atomic; replaces a stale socket, follows no symlink
    except BaseException:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
        raise
    finally:
        with contextlib.suppress(OSError):
            private.rmdir()
    return sock


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
        """Bind the socket (:func:`bind_kick_socket`); raises KickSocketError if unsafe."""
        try:
            sock = bind_kick_socket(self.path)
        except OSError as exc:
            raise KickSocketError(f"cannot bind {self.path}: {exc.strerror or exc}") from exc
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
