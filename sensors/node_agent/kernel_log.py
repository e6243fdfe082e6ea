"""The second source: NVIDIA driver messages from the kernel log.

Reads ``/dev/kmsg`` when the agent may (root, or CAP_SYSLOG), starting at the end of the
ring buffer; otherwise follows ``journalctl -k -f -o json``. The rule packs (the Xid table)
decide what a driver message means; this module decides which records are the driver's.

Any local user can make the kernel log text they chose: the kernel quotes the name of a
segfaulting file, a task's name (``comm``), a cgroup's name in its segfault, trap,
OOM-killer and hung-task messages, and root's tools may write to /dev/kmsg. So a record is
the driver's only when (:func:`driver_message`):

* it is of the kernel facility (a write to /dev/kmsg, or a journald entry of another
  transport, is of another: user, daemon, syslog);
* its message *starts* with one of the driver's exact headers naming a GPU:
  ``NVRM: Xid (PCI:DDDD:BB:DD): CODE,``, ``NVRM: GPU DDDD:BB:DD.F: `` or
  ``NVRM: GPU at PCI:DDDD:BB:DD: `` (:data:`DRIVER_HEADER`). A message quoting a user's
  name starts with the kernel's own words, or with a name of at most 15 characters (task,
  bridge and interface names are cut there) followed by the kernel's text: ``NVRM: `` alone
  is forgeable (a task named ``NVRM: GPU is lo``), these headers, 20 characters and more
  with the GPU's address, are not. It is one line and holds no escaped control character;
* every PCI address it names is one of this node's GPUs (:meth:`KernelLogSource.bind_inventory`:
  NVML's, or the devices the ``nvidia`` driver is bound to in sysfs);
* it is none of the kernel's formats that quote user-chosen names (checked although the
  anchored header already excludes them).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from resurrect.contracts import SignalKind
from resurrect.job_notes import JobNotes
from resurrect.sensors.node_agent.models import Reading
from resurrect.sensors.node_agent.nvml_source import utcnow

log = logging.getLogger(__name__)
_REFUSED = JobNotes(log)

# /dev/kmsg record: "<prio>,<seq>,<usec>,<flags>[,more];message" (prio = facility*8 + level)
_KMSG_HEADER = re.compile(r"^(?P<prio>[0-9]{1,4}),[0-9]{1,20},[0-9]{1,20},[^;]{0,64};")
KERNEL_FACILITY = 0
DRIVER_PREFIX = "NVRM: "
# The driver's headers naming a GPU, anchored (the only driver messages taken):
# "NVRM: Xid (PCI:0000:3b:00): 79,", "NVRM: GPU 0000:3b:00.0: ", "NVRM: GPU at PCI:0000:3b:00: "
DRIVER_HEADER = re.compile(
    r"NVRM: (?:Xid \(PCI:[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\): [0-9]{1,4},"
    r"|GPU [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]: "
    r"|GPU at PCI:[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}: )"
)
# The driver's Xid header: "NVRM: Xid (PCI:0000:3b:00): 79,"
_XID_HEADER = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\): (?P<xid>[0-9]{1,4}),"
)
# Any PCI address a driver message names ("PCI:0000:3b:00", "GPU 0000:3b:00.0")
_ANY_PCI = re.compile(r"(?<![0-9a-fA-F])([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?")
# The kernel's own messages that quote a name a user chooses (file, task, cgroup): never
# the driver's, whatever follows.
_QUOTING_FORMATS = re.compile(
    r"^(?:traps: |INFO: task |Out of memory|Memory cgroup out of memory|oom-kill:|oom_reaper:)"
    r"|\[[0-9]{1,10}\]: segfault at |\] trap |\] general protection "
    r"|: potentially unexpected fatal signal"
)
_READ_SIZE = 8192
_MAX_MESSAGE = 4096


@dataclass(frozen=True)
class KernelRecord:
    """One kernel log record: its syslog facility and its message (one record, whole)."""

    facility: int
    message: str


def kmsg_record(record: str) -> KernelRecord | None:
    """One /dev/kmsg line as a record; None for continuation (``KEY=value``) lines and
    for lines without the record header."""
    if record.startswith(" "):
        return None
    match = _KMSG_HEADER.match(record)
    if match is None:
        return None
    return KernelRecord(int(match.group("prio")) >> 3, record[match.end() :])


def kmsg_message(record: str) -> str | None:
    """The message of one /dev/kmsg line; None for continuation or header-less lines."""
    parsed = kmsg_record(record)
    return parsed.message if parsed else None


def journal_record(line: str) -> KernelRecord | None:
    """One ``journalctl -o json`` entry as a record: its ``MESSAGE`` (text, or bytes as a
    list of numbers) when it came through the kernel transport; None for anything else."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("_TRANSPORT") != "kernel":
        return None
    message = entry.get("MESSAGE")
    if isinstance(message, list) and all(isinstance(b, int) and 0 <= b < 256 for b in message):
        message = bytes(message).decode("utf-8", "replace")
    facility = entry.get("SYSLOG_FACILITY", "0")
    if not isinstance(message, str) or not isinstance(facility, str) or not facility.isascii():
        return None
    if not facility.isdigit():
        return None
    return KernelRecord(int(facility), message)


def driver_message(record: KernelRecord, gpu_pcis: Collection[str]) -> str | None:
    """The message of ``record`` when the NVIDIA driver wrote it (see the module's
    docstring), naming only GPUs of ``gpu_pcis`` (kernel form, lower case); else None."""
    message = record.message.rstrip("\n")
    if record.facility != KERNEL_FACILITY or not message.startswith(DRIVER_PREFIX):
        return None
    if len(message) > _MAX_MESSAGE or not message.isprintable() or "\\x" in message:
        return None  # one line of printable text (kmsg escapes control characters \xNN)
    if _QUOTING_FORMATS.search(message):
        return None
    if not DRIVER_HEADER.match(message):
        return None
    named = {pci.lower() for pci in _ANY_PCI.findall(message)}
    if not named <= set(gpu_pcis):
        return None
    return message


def names_no_gpu(record: KernelRecord) -> bool:
    """Whether ``record`` is a kernel-facility ``NVRM:`` line naming no GPU and no Xid: the
    driver's context lines (``NVRM: GPU Board Serial Number: ...`` beside an Xid, its
    load-time banner), which carry nothing the agent reads, so passing them by is no refusal."""
    message = record.message
    return (
        record.facility == KERNEL_FACILITY
        and message.startswith(DRIVER_PREFIX)
        and _ANY_PCI.search(message) is None
        and "xid" not in message.lower()
    )


def xid_header(message: str) -> tuple[str, int] | None:
    """``(pci, code)`` of a message with the driver's Xid header (PCI in the kernel's form,
    lower case), else None."""
    match = _XID_HEADER.match(message)
    return (match.group("pci").lower(), int(match.group("xid"))) if match else None


def xid_pci(message: str) -> str | None:
    """The PCI address an ``NVRM: Xid`` message names, in the kernel's form (lower case)."""
    header = xid_header(message)
    return header[0] if header else None


def nvidia_pci_addresses(driver_dir: Path) -> set[str]:
    """The PCI devices (kernel Xid form, ``0000:3b:00``) the ``nvidia`` driver is bound to,
    from its sysfs directory (entries ``0000:3b:00.0``)."""
    try:
        names = os.listdir(driver_dir)
    except OSError:
        return set()
    found = set()
    for name in names:
        match = re.fullmatch(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})\.[0-7]", name)
        if match:
            found.add(match.group(1))
    return found


JOURNAL_ARGV = ("journalctl", "-k", "-f", "-n", "0", "-o", "json")
NVIDIA_SYSFS = Path("/sys/bus/pci/drivers/nvidia")


class KernelLogSource:
    """Yields a :class:`Reading` for every record the NVIDIA driver logs from now on, about
    a GPU of this node (:func:`driver_message`)."""

    def __init__(
        self,
        *,
        kmsg_path: Path = Path("/dev/kmsg"),
        journal_argv: Sequence[str] = JOURNAL_ARGV,
        gpu_of_pci: Callable[[str], str | None] = lambda _pci: None,
        nvidia_sysfs: Path = NVIDIA_SYSFS,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.kmsg_path = kmsg_path
        self.journal_argv = list(journal_argv)
        self._gpu_of_pci = gpu_of_pci
        self._now = now
        self._nvidia_sysfs = nvidia_sysfs
        self._gpu_pcis: Callable[[], Collection[str]] = self.inventory
        self.origin = "none"
        self.refused = 0  # records that looked like the driver's and were not

    def inventory(self) -> set[str]:
        """The GPUs the ``nvidia`` driver is bound to (sysfs), when nothing better is bound."""
        return nvidia_pci_addresses(self._nvidia_sysfs)

    def bind_inventory(self, gpu_pcis: Callable[[], Collection[str]]) -> None:
        """Take this node's GPUs (PCI addresses, kernel form) from ``gpu_pcis`` (the
        agent's NVML inventory) instead of the ``nvidia`` driver's sysfs directory."""
        self._gpu_pcis = gpu_pcis

    def reading(self, record: KernelRecord, origin: str) -> Reading | None:
        """The reading for one kernel record, or None when it is not the driver's."""
        if DRIVER_PREFIX.strip() not in record.message:
            return None
        message = driver_message(record, self._gpu_pcis())
        if message is None:
            if names_no_gpu(record):
                return None
            self.refused += 1
            _REFUSED.note(origin, f"kernel record refused, not the driver's: {record.message}")
            return None
        named = _ANY_PCI.findall(message)
        pci = xid_pci(message) or (named[0].lower() if len(set(named)) == 1 else None)
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
        async for origin, record in self._records():
            reading = self.reading(record, origin)
            if reading is not None:
                yield reading

    async def _records(self) -> AsyncIterator[tuple[str, KernelRecord]]:
        fd = self._open_kmsg()
        if fd is not None:
            self.origin = "kmsg"
            try:
                async for line in _follow_fd(fd):
                    record = kmsg_record(line)
                    if record is not None:
                        yield "kmsg", record
            finally:
                os.close(fd)
            return
        self.origin = "journald"
        async for line in _follow_process(self.journal_argv):
            record = journal_record(line)
            if record is None:
                _REFUSED.note("journald", "journal line is no kernel entry in JSON (-o json)")
                continue
            yield "journald", record

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
                    yield raw.decode("utf-8", "replace")
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
            try:
                raw = await process.stdout.readline()
            except ValueError:  # a line over the stream's 64 KiB limit: dropped, not read
                _REFUSED.note("journald", "journal line longer than 64 KiB left out")
                continue
            if not raw:
                break
            yield raw.decode("utf-8", "replace").rstrip("\n")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
