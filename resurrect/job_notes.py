"""Notes about one job's bad data, logged without flooding the log.

The service loops (watcher, log follower, node-health reports) serve every job of the
cluster; one job's bad data (a comment that is not JSON, an output path that is a FIFO, a
record that makes a handler fail) must not stop them nor fill the log at every poll. A
:class:`JobNotes` logs a note at most once per ``every_s`` for each (job, note) and keeps
the latest note of each job for whoever wants to show it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from resurrect.throttle import OncePerWindow

MAX_JOBS = 4096  # notes kept; older ones are forgotten first
MAX_NOTE_CHARS = 500


def printable(text: str, limit: int = MAX_NOTE_CHARS) -> str:
    """``text`` cut to ``limit`` with control characters escaped (no forged log lines)."""
    cut = text[:limit]
    if cut.isprintable():
        return cut
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in cut)


class JobNotes:
    """Rate-limited, bounded per-job notes."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        every_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._clock = clock
        self._logged: OncePerWindow[tuple[str, str]] = OncePerWindow(every_s, max_keys=MAX_JOBS)
        self.latest: dict[str, str] = {}
        self.count = 0  # notes taken, logged or not
        self.suppressed = 0

    def note(self, job_id: str, text: str, *, level: int = logging.WARNING) -> bool:
        """Record ``text`` about ``job_id``; log it unless it was logged recently."""
        text = printable(text.removeprefix(f"job {job_id}: "))
        self.count += 1
        self.latest.pop(job_id, None)
        self.latest[job_id] = text
        if len(self.latest) > MAX_JOBS:
            del self.latest[next(iter(self.latest))]
        now = self._clock()
        key = (job_id, text)
        if self._logged.holds_back(key, now):
            self.suppressed += 1
            return False
        self._logged.let_through(key, now)
        self._log.log(level, "job %s: %s", job_id, text)
        return True

    def failed(self, job_id: str, what: str, exc: BaseException) -> bool:
        """A handler failed for one job: note it (with the traceback when first logged)."""
        text = f"{what} failed: {exc.__class__.__name__}: {str(exc)[:200]}"
        logged = self.note(job_id, text, level=logging.ERROR)
        if logged:
            self._log.debug("job %s: %s", job_id, what, exc_info=exc)
        return logged
