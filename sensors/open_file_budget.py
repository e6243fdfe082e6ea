"""How many job files the log follower may keep open between looks.

Keeping a followed file open makes a look that finds nothing new one ``fstat``; it costs a
descriptor per file. The budget is half the process's open-file limit (whose soft value is
raised to the hard one, at most ``MAX_RAISED``, on first use); beyond it files are opened
at each look again, as before, and nothing stops working.
"""

from __future__ import annotations

import os
import resource
import threading

MAX_RAISED = 65536


class OpenFileBudget:
    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self.count = 0
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        if self._limit is None:
            self._limit = _raise_soft_limit() // 2
        return self._limit

    def keep(self, fd: int) -> int:
        """Count ``fd`` as kept open; returns it."""
        with self._lock:
            self.count += 1
        return fd

    def release(self, fd: int) -> None:
        """Close a kept descriptor."""
        with self._lock:
            self.count -= 1
        os.close(fd)

    def may_keep(self) -> bool:
        return self.count <= self.limit


def _raise_soft_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MAX_RAISED if hard == resource.RLIM_INFINITY else min(hard, MAX_RAISED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return MAX_RAISED if soft == resource.RLIM_INFINITY else int(soft)


open_files = OpenFileBudget()
