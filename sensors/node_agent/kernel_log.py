"""The second source: NVIDIA driver messages from the kernel log.

Reads ``/dev/kmsg`` when the agent may (root, or CAP_SYSLOG), starting at the end of the
ring buffer; otherwise follows ``journalctl -k -f``. Only lines from the NVIDIA driver
(``NVRM:``) become readings: the rule packs (the Xid table) decide what they mean.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from pathlib import Path

from resurrect.contracts import SignalKind
from resurrect.sensors.node_agent.models import Reading
from resurrect.sensors.node_agent.nvml_source import utcnow

log = logging.getLogger(__name__)

# /dev/kmsg record: "<prio>,<seq>,<usec>,<flags>[,more];message"
_KMSG_HEADER = re.compile(r"^\d{1,4},\d{1,20},\d{1,20},[^;]{0,64};")
_XID_PCI = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})")
_READ_SIZE = 8192


def kmsg_message(record: str) -> str | None:
    """The message of one /dev/kmsg line; None for continuation (``KEY=value``) lines."""
    if record.startswith(" "):
        return None
    match = _KMSG_HEADER.match(record)
    return record[match.end() :] if match else record


def is_driver_line(message: str) -> bool:
    """Whether a kernel message comes from the NVIDIA driver (worth a rule scan)."""
    return "NVRM" in message


def xid_pci(message: str) -> str | None:
    """The PCI address an ``NVRM: Xid`` line names, in the kernel's form (lower case)."""
    match = _XID_PCI.search(message)
    return match.group("pci").lower() if match else None


class KernelLogSource:
    """Yields a :class:`Reading` for every NVIDIA driver line the kernel logs from now on."""

    def __init__(
        self,
        *,
        kmsg_path: Path = Path("/dev/kmsg"),
        journal_argv: Sequence[str] = ("journalctl", "-k", "-f", "-n", "0", "-o", "cat"),
        gpu_of_pci: Callable[[str], str | None] = lambda _pci: None,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.kmsg_path = kmsg_path
        self.journal_argv = list(journal_argv)
        self._gpu_of_pci = gpu_of_pci
        self._now = now
        self.origin = "none"

    def reading(self, message: str, origin: str) -> Reading | None:
        """The reading for one kernel message, or None when it is not the driver's."""
        if not is_driver_line(message):
            return None
        pci = xid_pci(message)
        return Reading(
            kind=SignalKind.KERNEL_LOG,
            source=origin,
            metric="kernel",
            text=message.strip(),
            gpu=self._gpu_of_pci(pci) if pci else None,
            pci=pci,
            observed_at=self._now(),
        )

    async def readings(self) -> AsyncIterator[Reading]:
        """Follow the kernel log until cancelled."""
        async for origin, message in self._messages():
            reading = self.reading(message, origin)
            if reading is not None:
                yield reading

    async def _messages(self) -> AsyncIterator[tuple[str, str]]:
        fd = self._open_kmsg()
        if fd is not None:
            self.origin = "kmsg"
            try:
                async for message in _follow_fd(fd):
                    yield "kmsg", message
            finally:
                os.close(fd)
            return
        self.origin = "journald"
        async for message in _follow_process(self.journal_argv):
            yield "journald", message

    def _open_kmsg(self) -> int | None:
        try:
            fd = os.open(self.kmsg_path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            log.info("kernel log: %s not readable (%s); using journald", self.kmsg_path, exc)
            return None
        with contextlib.suppress(OSError):  # a FIFO (tests) cannot seek
            os.lseek(fd, 0, os.SEEK_END)  # only messages from now on
        return fd


async def _follow_fd(fd: int) -> AsyncIterator[str]:
    """Records from a non-blocking descriptor (/dev/kmsg, or a pipe in tests)."""
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    loop.add_reader(fd, ready.set)
    try:
        partial = b""
        while True:
            await ready.wait()
            ready.clear()
            while True:
                try:
                    chunk = os.read(fd, _READ_SIZE)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno == errno.EPIPE:  # records overwritten before we read them
                        continue
                    raise
                if not chunk:  # writer closed (pipe): nothing more will come
                    return
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()
                for raw in lines:
                    message = kmsg_message(raw.decode("utf-8", "replace"))
                    if message:
                        yield message
    finally:
        loop.remove_reader(fd)


async def _follow_process(argv: Sequence[str]) -> AsyncIterator[str]:
    """Lines of a long-running command (journalctl -f); stops quietly if it cannot start."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
    except OSError as exc:
        log.warning("kernel log: cannot run %s: %s; kernel messages not watched", argv[0], exc)
        return
    assert process.stdout is not None
    try:
        while True:
            raw = await process.stdout.readline()
            if not raw:
                break
            yield raw.decode("utf-8", "replace").rstrip("\n")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
