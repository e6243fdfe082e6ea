"""Reading a job's output files safely.

Job output is untrusted and can be anything: huge, sparse, binary, being written, gone, or
not a file at all (a FIFO that would block a reader forever, a socket, a device, a
directory, a symlink to ``/dev/zero`` or to someone else's file). So:

* :func:`open_job_file` opens only a *regular file owned by the job's owner*, without
  following a symlink at the path and without ever opening anything else: it takes an
  ``O_PATH`` handle first (which opens no device and blocks on no FIFO), checks that
  inode, and only then reopens that same inode for reading (``O_NONBLOCK``), so the
  file cannot be swapped between the check and the read. Anything else is refused with
  :class:`~resurrect.errors.JobFileRefused`, whose message is the note to show.
* :func:`read_data` reads a bounded byte range and skips holes (``SEEK_DATA``), so a sparse
  terabyte costs nothing; it stops at a deadline or when asked to.
* :func:`read_tail` gives the last lines within ``max_bytes`` with their real line numbers
  where counting them stays within a bounded budget (else ``None``), each line cut at
  ``max_line_bytes`` and decoded with replacement characters; given where the current job
  attempt's output begins (an :class:`~resurrect.contracts.OutputMark`), nothing before it.
* :func:`output_mark` is where a file ends now: where the next attempt's output will begin.
* :func:`attempt_output` is where the interrupted attempt's output begins in each file.

A requeued job may append every attempt to the same file (``--open-mode=append``, or
``JobFileAppend=1``), so a recovery that read the whole tail would judge earlier attempts'
lines as this one's (name a node the attempt never ran on, miss the one that failed). The
start of an attempt comes from resurrect, never from the job's output, in this order:

1. the files' sizes the recovery of the attempt before recorded while the requeued job was
   pending, its earlier run gone (``RecoveryOutcome.next_attempt_output``): exact;
2. where the log follower began following this attempt (``Interruption.output_marks``,
   taken when it first saw the attempt running): later output of the attempt is all there;
3. neither: the file's tail is read as it is, with a note that it may hold earlier
   attempts' lines.

A first attempt (restart count 0) owns its files from their start: nothing to decide.
Whether a mark still fits the file (the same inode, not beyond its end) is checked where
the file is read (:func:`read_tail`).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from resurrect.contracts import OutputMark
from resurrect.errors import JobFileRefused

log = logging.getLogger(__name__)

CHUNK = 1 << 20
MAX_LINE_BYTES = 64 * 1024
# Counting the lines before the tail reads at most this much data (holes not counted);
# beyond it line numbers are unknown.
COUNT_BUDGET = 64 << 20

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symlink",
}


def _reopen(handle: int, path: str, checked: os.stat_result) -> int:
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:  # the very inode checked, through the O_PATH handle
        return os.open(f"/proc/self/fd/{handle}", flags)
    except FileNotFoundError:  # no /proc: reopen the path, then make sure it is the same
        fd = os.open(path, flags | os.O_NOFOLLOW)
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (checked.st_dev, checked.st_ino):
            os.close(fd)
            raise JobFileRefused(f"{path}: replaced while being opened") from None
        return fd


def open_job_file(path: str | Path, owner_uid: int | None) -> int:
    """A read-only descriptor of the regular file at ``path`` owned by ``owner_uid`` (when
    known). Raises :class:`JobFileRefused` (the note) or ``OSError`` (no such file ...)."""
    path = os.fspath(path)
    handle = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        checked = os.fstat(handle)
        if not stat.S_ISREG(checked.st_mode):
            kind = _KINDS.get(stat.S_IFMT(checked.st_mode), "not a regular file")
            raise JobFileRefused(f"{path} is {kind}, not a regular file: not read")
        if owner_uid is not None and checked.st_uid != owner_uid:
            raise JobFileRefused(
                f"{path} belongs to uid {checked.st_uid}, not the job's owner"
                f" (uid {owner_uid}): not read"
            )
        return _reopen(handle, path, checked)
    finally:
        os.close(handle)


@dataclass
class Budget:
    """When a read must stop: a monotonic deadline and/or a flag another thread sets."""

    deadline: float | None = None
    stop: threading.Event | None = None

    def spent(self) -> bool:
        if self.stop is not None and self.stop.is_set():
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline


def next_data(fd: int, position: int, end: int) -> int:
    """Where data starts at or after ``position`` (``end`` if only a hole is left)."""
    try:
        return min(os.lseek(fd, position, os.SEEK_DATA), end)
    except OSError as exc:
        return end if exc.errno == errno.ENXIO else position


def data_end(fd: int, position: int, end: int) -> int:
    """Where the data that starts at ``position`` ends: the next hole, or ``end``."""
    try:
        return min(os.lseek(fd, position, os.SEEK_HOLE), end)
    except OSError:
        return end


def _data_segments(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """The ``[from, to)`` ranges of ``[start, end)`` that hold data (holes left out)."""
    segments: list[tuple[int, int]] = []
    position = start
    while position < end and len(segments) < 4096:
        try:
            data_at = os.lseek(fd, position, os.SEEK_DATA)
            hole_at = os.lseek(fd, data_at, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole up to the end
                break
            return [(position, end)]  # no SEEK_DATA here: treat all as data
        if data_at >= end:
            break
        segments.append((data_at, min(hole_at, end)))
        position = hole_at
    return segments


def read_data(fd: int, start: int, end: int, budget: Budget | None = None) -> bytes:
    """The bytes of ``[start, end)``, holes skipped (a skipped hole reads as one newline, so
    text on either side is never joined into one line); stops early when the budget is
    spent."""
    budget = budget or Budget()
    parts: list[bytes] = []
    previous_end = start
    for seg_start, seg_end in _data_segments(fd, start, end):
        if seg_start > previous_end:
            parts.append(b"\n")
        position = seg_start
        while position < seg_end:
            if budget.spent():
                return b"".join(parts)
            block = os.pread(fd, min(CHUNK, seg_end - position), position)
            if not block:
                return b"".join(parts)
            parts.append(block)
            position += len(block)
        previous_end = seg_end
    return b"".join(parts)


def count_lines(fd: int, end: int, budget: Budget | None = None) -> int | None:
    """Newlines in ``[0, end)``, or None when that takes more than :data:`COUNT_BUDGET`
    bytes of data (or the budget is spent)."""
    budget = budget or Budget()
    segments = _data_segments(fd, 0, end)
    if sum(to - frm for frm, to in segments) > COUNT_BUDGET:
        return None
    count = 0
    for seg_start, seg_end in segments:
        position = seg_start
        while position < seg_end:
            if budget.spent():
                return None
            block = os.pread(fd, min(CHUNK, seg_end - position), position)
            if not block:
                break
            count += block.count(b"\n")
            position += len(block)
    return count


@dataclass
class TailRead:
    """The last lines of a file, as (line number or None, text), and why not, if not."""

    lines: list[tuple[int | None, str]] = field(default_factory=list)
    note: str | None = None


def output_mark(path: str | Path, owner_uid: int | None) -> OutputMark | None:
    """Where ``path`` ends now (its inode and size), for a regular file of ``owner_uid``;
    None for a file that is not there or must not be read."""
    try:
        fd = open_job_file(path, owner_uid)
    except (JobFileRefused, OSError):
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    return OutputMark(path=os.fspath(path), inode=st.st_ino, offset=st.st_size)


@dataclass
class AttemptOutput:
    """Per file path, where the attempt's output begins (absent: read the tail as it is),
    and notes on files whose start is not known."""

    begins: dict[str, OutputMark] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def attempt_output(
    restart_count: int,
    paths: Sequence[str],
    recorded: Sequence[OutputMark] | None,
    followed: Sequence[OutputMark] = (),
    unrecorded_why: str = "",
) -> AttemptOutput:
    """Where attempt ``restart_count`` begins in each of ``paths``: from ``recorded`` (the
    earlier recovery's marks; None when it could not be read, ``unrecorded_why`` saying
    why), else from ``followed`` (the log follower's), else unknown (a note)."""
    found = AttemptOutput()
    if restart_count == 0:
        return found
    by_recovery = {m.path: m for m in recorded or ()}
    by_follower = {m.path: m for m in followed}
    for path in paths:
        mark = by_recovery.get(path) or by_follower.get(path)
        if mark is not None:
            found.begins[path] = mark
            continue
        why = unrecorded_why or (
            "the recovery of the attempt before recorded no size of it"
            if recorded is not None
            else "no earlier recovery recorded it"
        )
        found.notes.append(
            f"{path}: where attempt {restart_count}'s output begins is not known ({why}; no"
            " log follower report gives it): its tail was read as it is and may hold"
            " earlier attempts' lines"
        )
    return found


def _floor(path: str | Path, begin: OutputMark | None, st: os.stat_result) -> tuple[int, str]:
    """Where reading may start given where the attempt began (``begin``), and a note when
    that mark does not fit the file (another file now, or shorter than the mark)."""
    if begin is None:
        return 0, ""
    if begin.inode != st.st_ino:
        return 0, (
            f"{path}: another file than the one this attempt began writing (replaced or"
            " rotated): read from its start"
        )
    if begin.offset > st.st_size:
        return 0, (
            f"{path}: shorter ({st.st_size} bytes) than when this attempt began"
            f" ({begin.offset} bytes; truncated or rewritten): read from its start"
        )
    return begin.offset, ""


def read_tail(
    path: str | Path,
    max_bytes: int,
    *,
    owner_uid: int | None = None,
    budget: Budget | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    begin: OutputMark | None = None,
) -> TailRead:
    """The last lines of ``path`` within ``max_bytes``, none before ``begin`` (where the
    current attempt's output begins in this file, when known); a file that cannot or must
    not be read gives no lines and a note."""
    budget = budget or Budget()
    try:
        fd = open_job_file(path, owner_uid)
    except JobFileRefused as exc:
        return TailRead(note=str(exc))
    except OSError as exc:
        return TailRead(note=f"{path}: cannot read job output: {exc.strerror or exc}")
    try:
        st = os.fstat(fd)
        size = st.st_size
        floor, floor_note = _floor(path, begin, st)
        start = max(floor, size - max_bytes)
        counted = count_lines(fd, start, budget) if start else 0
        data = read_data(fd, start, size, budget)
    except OSError as exc:
        return TailRead(note=f"{path}: cannot read job output: {exc.strerror or exc}")
    finally:
        os.close(fd)
    notes = [floor_note] if floor_note else []
    if budget.spent():
        notes.append(f"{path}: reading stopped at its time limit")
    note = "; ".join(notes) or None
    lines = data.split(b"\n")
    first_line = None if counted is None else counted + 1
    if start > floor and lines:
        lines = lines[1:]  # the first piece is the end of a line we did not read whole
        first_line = None if first_line is None else first_line + 1
    if lines and lines[-1] == b"":
        lines.pop()
    return TailRead(
        lines=[
            (
                None if first_line is None else first_line + index,
                raw[:max_line_bytes].decode("utf-8", "replace").rstrip("\r"),
            )
            for index, raw in enumerate(lines)
        ],
        note=note,
    )
