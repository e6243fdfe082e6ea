"""One followed output file: where the follower is in it, and reading what was appended.

Only a regular file owned by the job's owner is read
(:func:`resurrect.log_reading.open_job_file`); it stays open between looks. Truncation (the
file got shorter) and rotation (another inode at the path) restart reading from the top.
Partial lines wait for their end, bounded by ``MAX_PENDING`` bytes; a longer line is cut and
scanned by its head. A look reads at most the job's share (:mod:`sensors.follower_share`); a
file too far behind goes on from its last bytes, what it passed over counted in ``skipped``.
Bytes are untrusted: invalid UTF-8 is replaced.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from resurrect.contracts import OutputMark
from resurrect.errors import JobFileRefused
from resurrect.log_reading import count_lines, data_end, next_data, open_job_file
from resurrect.sensors.follower_share import UNBOUNDED_CPU, DistinctLines, LookBudget
from resurrect.sensors.open_file_budget import open_files
from resurrect.telemetry.record import record_follower_read

MAX_PENDING = 256 << 10  # a partial line longer than this is cut
MIN_READ = 16 << 10  # after a look that could not handle all it read, read less


@dataclass
class FollowedFile:
    """Where we are in one file. Only a regular file owned by ``owner_uid`` is read
    (:func:`resurrect.log_reading.open_job_file`); ``refused`` says why not, while not."""

    path: str
    owner_uid: int | None = None
    inode: int | None = None
    offset: int = 0
    line_number: int | None = 0  # None: unknown (following began in the middle)
    pending: bytes = b""
    refused: str | None = None
    fd: int | None = field(default=None, repr=False)  # kept open between looks
    consumed: int = 0  # bytes the last read took
    skipped: int = 0  # bytes passed over unread (too far behind) and not noted yet
    _read_size: int = 0  # bytes to read at the next look (0: the share's)
    began: OutputMark | None = None  # where following this attempt began (a requeued job)

    def _open(self) -> int | None:
        try:
            fd = open_job_file(self.path, self.owner_uid)
        except JobFileRefused as exc:
            self.refused = str(exc)
            return None
        except OSError:  # not there (yet): nothing to read
            return None
        self.refused = None
        return fd

    def skip_to_end(self) -> None:
        """Start at the file's current end (its earlier lines were already judged)."""
        fd = self._open()
        if fd is None:
            return
        try:
            st = os.fstat(fd)
            self.inode, self.offset, self.pending = st.st_ino, st.st_size, b""
            self.began = OutputMark(path=self.path, inode=st.st_ino, offset=st.st_size)
            self.line_number = count_lines(fd, st.st_size)
        except OSError:
            return
        finally:
            os.close(fd)

    def close(self) -> None:
        if self.fd is not None:
            open_files.release(self.fd)
            self.fd = None

    def _current(self) -> int | None:
        """The open descriptor of the file, opening (and checking) it if needed."""
        if self.fd is None:
            fd = self._open()
            if fd is None:
                return None
            self.fd = open_files.keep(fd)
        return self.fd

    def _path_moved(self, st: os.stat_result) -> bool:
        """Does the path now name another file (rotated, replaced, removed)?"""
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return True
        return (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino)

    def read_new_lines(self, budget: LookBudget | None = None) -> list[tuple[int | None, bytes]]:
        """All of :meth:`lines` at once."""
        return list(self.lines(budget))

    def lines(self, budget: LookBudget | None = None) -> Iterator[tuple[int | None, bytes]]:
        """The distinct non-blank lines completed since the last look, each at its first
        appearance, as (line number or None, bytes), while ``budget`` lasts: bytes read and
        distinct lines looked at are taken from it, and no line follows once its CPU time is
        spent (the first always comes). What is left is read again at the next look. A file
        more than the share's ``max_behind`` bytes behind continues from its last
        ``resume_from`` bytes (:attr:`skipped` counts what was passed over)."""
        budget = budget or LookBudget(UNBOUNDED_CPU)
        self.consumed = 0
        if budget.bytes_left <= 0 or budget.lines_left <= 0:
            return
        read = self._read(budget)
        if read is None:
            return
        start, data = read
        self.consumed = len(data)
        self.offset = start + len(data)
        budget.bytes_left -= len(data)
        earlier = self.pending  # the start of a line begun at an earlier look
        data = earlier + data
        complete_to = data.rfind(b"\n") + 1
        self.pending = data[complete_to:]
        tail = None
        if len(self.pending) > MAX_PENDING:
            tail, self.pending = self.pending[:MAX_PENDING], b""
        base = self.line_number
        walker = DistinctLines(data[:complete_to])
        given = False
        while (line := walker.advance()) is not None:
            at, index, text = line
            if budget.lines_left <= 0 or (given and budget.cpu_spent()):
                # from this line's first appearance on, all is read again at the next look
                self.offset, self.pending = start + at - len(earlier), b""
                self.line_number = None if base is None else base + index
                self._read_size = max(MIN_READ, 2 * (at - len(earlier)))
                return
            budget.lines_left -= 1
            if text.strip():
                given = True
                yield (None if base is None else base + index + 1, text)
        self._read_size = budget.share.bytes
        self.line_number = None if base is None else base + data.count(b"\n")
        if tail is not None:
            self.line_number = None if self.line_number is None else self.line_number + 1
            yield (self.line_number, tail)

    def _read(self, budget: LookBudget) -> tuple[int, bytes] | None:
        """Where the new data starts and a run of it (up to the next hole, within the
        budget's bytes), after rotation, truncation and falling behind are dealt with."""
        share = budget.share
        fd = self._current()
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if st.st_ino == self.inode and st.st_size == self.offset:
                if not self._path_moved(st):
                    return None  # nothing new: one fstat and one lstat
                self.close()  # rotated or replaced: the file now at the path, checked
                fd = self._current()
                if fd is None:
                    return None
                st = os.fstat(fd)
            if self.inode != st.st_ino or st.st_size < self.offset:
                # new file, rotated, or truncated: start from the top, or from the last
                # resume_from bytes of a file that is already huge
                self.inode, self.offset, self.line_number, self.pending = st.st_ino, 0, 0, b""
                if st.st_size > share.resume_from:
                    self._skip(st.st_size - share.resume_from)
            elif st.st_size - self.offset > share.max_behind:
                self._skip(st.st_size - share.resume_from)
            if st.st_size == self.offset:
                return None
            start = next_data(fd, self.offset, st.st_size)  # a hole holds no lines
            if start > self.offset and self.pending:
                self.pending += b"\n"
            self.offset = start
            # one run of data (up to the next hole), so a position in it is start + index
            size = max(1, min(budget.bytes_left, self._read_size or share.bytes))
            end = min(data_end(fd, start, st.st_size), start + size)
            data = os.pread(fd, end - start, start) if end > start else b""
            record_follower_read(len(data), time.time() - st.st_mtime)
            return start, data
        except OSError:
            self.close()
            return None
        finally:
            if self.fd is not None and not open_files.may_keep():
                self.close()  # over the open-file budget: reopen at each look

    def _skip(self, to: int) -> None:
        """Continue from byte ``to``: what lies between is counted in :attr:`skipped`."""
        self.skipped += to - self.offset
        self.offset, self.line_number, self.pending = to, None, b""
