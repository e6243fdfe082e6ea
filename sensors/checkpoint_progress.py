"""Cheap notice of activity in a job's checkpoint directory (for hang detection).

A job that writes checkpoints is making progress even when it prints nothing. Looking for
that must stay cheap however big the directory gets (a run may keep 50,000 entries) and
however often the follower polls, so a :class:`CheckpointProgress`:

* looks at most every ``min_interval_s`` (the follower uses ``max(hang_after_s / 10, 5)``);
* at each look stats the directory itself (its mtime moves when an entry is added, removed
  or renamed), the few newest entries, and the entries of the newest subdirectory (where a
  save in progress writes); only when the directory itself changed does it list it again,
  and then stats only the names that are new;
* before the follower declares a hang, :meth:`changed_since` makes sure with one full scan
  (bounded to :data:`MAX_ENTRIES` entries) that nothing at all was modified since the last
  progress, so a file rewritten in place among old ones is not missed.

The directory is the job owner's: entries are ``lstat``-ed (symlinks are not followed), only
metadata is read, never contents, and every error just means "no activity seen".
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator

MAX_ENTRIES = 100_000  # entries looked at in one listing
NEWEST_KEPT = 4  # top-level entries watched between listings
MAX_INNER = 256  # entries of the newest subdirectory watched

Stamp = tuple[int, int]  # (mtime_ns, size)


class CheckpointProgress:
    """Notices writes in one checkpoint directory; counts its file-system operations."""

    def __init__(
        self,
        directory: str,
        *,
        min_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._next_look = 0.0
        self._dir_stamp: tuple[int, int, int] | None = None
        self._names: set[str] = set()
        self._newest: dict[str, Stamp] = {}  # the newest few top-level entries
        self._inner: dict[str, Stamp] = {}  # the newest subdirectory's entries
        self._newest_dir: str | None = None
        self.fs_ops = 0  # lstat/stat calls and directory listings, for benchmarks

    # ------------------------------------------------------------------ primitives
    def _lstat(self, path: str) -> os.stat_result | None:
        self.fs_ops += 1
        try:
            return os.lstat(path)
        except OSError:
            return None

    def _list(self, path: str) -> Iterator[str]:
        self.fs_ops += 1
        try:
            with os.scandir(path) as entries:
                for count, entry in enumerate(entries):
                    if count >= MAX_ENTRIES:
                        return
                    yield entry.name
        except OSError:
            return

    def _stamps(self, directory: str, names: list[str]) -> dict[str, tuple[Stamp, bool]]:
        found: dict[str, tuple[Stamp, bool]] = {}
        for name in names:
            st = self._lstat(os.path.join(directory, name))
            if st is not None:
                found[name] = ((st.st_mtime_ns, st.st_size), stat.S_ISDIR(st.st_mode))
        return found

    def _inner_stamps(self) -> dict[str, Stamp]:
        if self._newest_dir is None:
            return {}
        path = os.path.join(self.directory, self._newest_dir)
        names = sorted(self._list(path))[:MAX_INNER]
        return {name: stamp for name, (stamp, _) in self._stamps(path, names).items()}

    def _remember_newest(self, stamps: dict[str, tuple[Stamp, bool]]) -> None:
        ranked = sorted(stamps.items(), key=lambda item: (item[1][0][0], item[0]), reverse=True)
        self._newest = {name: stamp for name, (stamp, _) in ranked[:NEWEST_KEPT]}
        dirs = [name for name, (_, is_dir) in ranked if is_dir]
        if dirs:
            self._newest_dir = dirs[0]

    def _directory_stamp(self) -> tuple[int, int, int] | None:
        self.fs_ops += 1
        try:
            st = os.stat(self.directory)  # the root may be a symlink the operator set up
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)

    # ------------------------------------------------------------------ interface
    def due(self) -> bool:
        return self._clock() >= self._next_look

    def changed(self) -> bool:
        """Did anything move since the last look? (False until ``min_interval_s`` passed.)"""
        if not self.due():
            return False
        self._next_look = self._clock() + self.min_interval_s
        first = self._dir_stamp is None
        moved = False
        dir_stamp = self._directory_stamp()
        if dir_stamp is None:
            return False
        if dir_stamp != self._dir_stamp:
            names = set(self._list(self.directory))
            new = sorted(names) if first else sorted(names - self._names)
            fresh = self._stamps(self.directory, new)
            kept = {n: (s, n == self._newest_dir) for n, s in self._newest.items() if n in names}
            self._remember_newest(kept | fresh)
            self._names = names
            self._dir_stamp = dir_stamp
            moved = not first
        else:
            now = self._stamps(self.directory, sorted(self._newest))
            moved = any(now.get(n, (None, False))[0] != s for n, s in self._newest.items())
            if moved:
                self._remember_newest(
                    {n: (s, n == self._newest_dir) for n, (s, _) in now.items()}
                    | {n: (s, False) for n, s in self._newest.items() if n not in now}
                )
        inner = self._inner_stamps()
        moved = moved or (not first and inner != self._inner)
        self._inner = inner
        return moved

    def changed_since(self, wall_time: float) -> bool:
        """Was any entry (top level, or in the newest subdirectory) modified after
        ``wall_time`` (seconds since the epoch)? One full scan; use it sparingly."""
        threshold = int(wall_time * 1e9)
        dir_stamp = self._directory_stamp()
        if dir_stamp is None:
            return False
        names = list(self._list(self.directory))
        stamps = self._stamps(self.directory, names)
        self._remember_newest(stamps)
        self._names = set(names)
        inner = self._inner_stamps()
        newest = max(
            [dir_stamp[1], *(s[0] for s, _ in stamps.values()), *(s[0] for s in inner.values())]
        )
        return newest > threshold
