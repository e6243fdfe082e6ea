"""Cheap notice of activity in a job's checkpoint directory (for hang detection).

A job that writes checkpoints is making progress even when it prints nothing. Looking for
that must stay cheap however big the directory gets (a run may keep 100,000 entries) and
however often the follower looks (once a second in adaptive mode), so a
:class:`CheckpointProgress`:

* looks at most every ``min_interval_s``;
* watches two directories, the checkpoint directory and its newest subdirectory (where a
  save in progress writes), the same way: at each look it stats the directory itself (its
  inode, mtime and ctime move when an entry is added, removed or renamed) and its few newest
  entries (a file written in place); it lists a directory again only when the directory
  changed since its last listing, and then stats only the names that are new;
* counts the *entries* it reads (names listed, entries stat'ed) against the job's budget of
  :data:`ENTRIES_PER_S` a second (a listing goes ahead while the budget is not in debt; one
  listing reads at most :data:`MAX_ENTRIES`): a directory that keeps changing is noticed
  from its stamp at every look and listed again only as often as the budget allows;
* before the follower declares a hang, :meth:`changed_since` makes sure with one full look
  (bounded to :data:`MAX_ENTRIES` entries a listing) that nothing at all was modified since
  the last progress, so a file rewritten in place among old ones is not missed.

The directory is named by the job, so it is watched only when it is the job owner's and no
other user can change it (:func:`resurrect.checkpoint.owner.ownership_problem`, the rule
checkpoint verification applies); otherwise :attr:`CheckpointProgress.refused` says why and
no activity is ever seen. Its path may hold symlinks an operator made; below it nothing is
followed: the subdirectory is opened ``O_NOFOLLOW`` from the directory's descriptor and
entries are ``lstat``-ed. Only metadata is read, never contents, and every error just means
"no activity seen".
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from resurrect.checkpoint.owner import ownership_problem

MAX_ENTRIES = 100_000  # entries read in one listing
NEWEST_KEPT = 4  # entries of each directory watched between listings
ENTRIES_PER_S = 5_000  # a job's listing budget: entries read a second, on average
ENTRIES_BURST = 2 * MAX_ENTRIES  # what the budget may hold (following starts with it full)

_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC
_BELOW_FLAGS = _ROOT_FLAGS | os.O_NOFOLLOW

Stamp = tuple[int, int]  # (mtime_ns, size)
DirStamp = tuple[int, int, int]  # (inode, mtime_ns, ctime_ns)


@dataclass
class _Watched:
    """What is known of one watched directory."""

    name: str  # "" for the checkpoint directory, else its subdirectory's name
    stamp: DirStamp | None = None  # at the last look
    listed: DirStamp | None = None  # at the last listing
    names: set[str] = field(default_factory=set)
    newest: dict[str, tuple[Stamp, bool]] = field(default_factory=dict)  # (stamp, is a dir)
    newest_dir: str | None = None


def _dir_stamp(st: os.stat_result) -> DirStamp:
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


class CheckpointProgress:
    """Notices writes in one checkpoint directory; counts what it reads."""

    def __init__(
        self,
        directory: str,
        *,
        min_interval_s: float,
        owner_uid: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        entries_per_s: float = ENTRIES_PER_S,
    ) -> None:
        self.directory = directory
        self.min_interval_s = min_interval_s
        self.owner_uid = owner_uid
        self._clock = clock
        self._next_look = 0.0
        self._top = _Watched("")
        self._inner: _Watched | None = None
        self.entries_per_s = entries_per_s
        self._tokens = float(ENTRIES_BURST)
        self._refilled = clock()
        self.refused: str | None = None  # why the directory is not watched, while it is not
        self.fs_ops = 0  # opens, stats and listings (by path or name), for benchmarks
        self.entries_read = 0  # names listed and entries stat'ed, for the budget

    # ------------------------------------------------------------------ budget
    def _may_list(self) -> bool:
        now = self._clock()
        self._tokens = min(
            float(ENTRIES_BURST), self._tokens + (now - self._refilled) * self.entries_per_s
        )
        self._refilled = now
        return self._tokens > 0

    def _charge(self, entries: int) -> None:
        self.entries_read += entries
        self._tokens -= entries

    # ------------------------------------------------------------------ primitives
    def _open_root(self) -> int | None:
        """The checkpoint directory's descriptor, when it is the job owner's to watch."""
        self.fs_ops += 1
        try:
            fd = os.open(self.directory, _ROOT_FLAGS)
        except OSError:
            return None
        try:
            problem = ownership_problem(os.fstat(fd), self.owner_uid)
        except OSError:
            problem = "cannot be examined"
        if problem is not None:
            os.close(fd)
            self.refused = f"checkpoint_dir {self.directory}: {problem}: its activity is not seen"
            return None
        self.refused = None
        return fd

    def _open_below(self, root: int, name: str) -> int | None:
        self.fs_ops += 1
        try:
            return os.open(name, _BELOW_FLAGS, dir_fd=root)
        except OSError:
            return None

    def _list(self, fd: int) -> set[str]:
        self.fs_ops += 1
        names: set[str] = set()
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if len(names) >= MAX_ENTRIES:
                        break
                    names.add(entry.name)
        except OSError:
            pass
        self._charge(len(names))
        return names

    def _stamps(self, fd: int, names: list[str]) -> dict[str, tuple[Stamp, bool]]:
        found: dict[str, tuple[Stamp, bool]] = {}
        for name in names:
            self.fs_ops += 1
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            found[name] = ((st.st_mtime_ns, st.st_size), stat.S_ISDIR(st.st_mode))
        self._charge(len(names))
        return found

    @staticmethod
    def _remember_newest(watched: _Watched, stamps: dict[str, tuple[Stamp, bool]]) -> None:
        ranked = sorted(stamps.items(), key=lambda item: (item[1][0][0], item[0]), reverse=True)
        watched.newest = dict(ranked[:NEWEST_KEPT])
        dirs = [name for name, (_, is_dir) in ranked if is_dir]
        if dirs:
            watched.newest_dir = dirs[0]
        elif watched.newest_dir not in watched.names:
            watched.newest_dir = None

    # ------------------------------------------------------------------ one directory
    def _look(self, fd: int, watched: _Watched, *, full: bool = False) -> bool:
        """Did ``watched`` (open as ``fd``) change since the last look? Lists it again when
        it changed since its last listing (and the budget allows, or ``full``)."""
        try:
            stamp = _dir_stamp(os.fstat(fd))
        except OSError:
            return False
        first = watched.stamp is None
        moved = not first and stamp != watched.stamp
        watched.stamp = stamp
        before = {name: seen for name, (seen, _) in watched.newest.items()}
        if full or (stamp != watched.listed and self._may_list()):
            names = self._list(fd)
            if watched.listed is None or full:
                new = sorted(names)
            else:
                new = sorted(names - watched.names)
            watched.names = names
            watched.listed = stamp
            kept = [n for n in watched.newest if n in names and n not in new]
            stamps = self._stamps(fd, [*kept, *new])
            if watched.newest_dir in names and watched.newest_dir not in stamps:
                # a newer directory must beat the current one to replace it
                stamps |= self._stamps(fd, [watched.newest_dir])
            self._remember_newest(watched, stamps)
        else:
            stamps = self._stamps(fd, list(watched.newest))
            if stamps or watched.newest:
                self._remember_newest(
                    watched, stamps | {n: s for n, s in watched.newest.items() if n not in stamps}
                )
        if first:
            return False
        return moved or any(stamps.get(n, (None, False))[0] != s for n, s in before.items())

    def _look_inner(self, root: int, *, full: bool = False) -> tuple[bool, int | None]:
        """Look at the newest subdirectory; (activity seen, its newest mtime if ``full``)."""
        name = self._top.newest_dir
        if name is None:
            self._inner = None
            return False, None
        if self._inner is None or self._inner.name != name:
            self._inner = _Watched(name)  # a new save: its appearance was top-level activity
        fd = self._open_below(root, name)
        if fd is None:
            return False, None
        try:
            moved = self._look(fd, self._inner, full=full)
        finally:
            os.close(fd)
        newest = max((s[0] for s, _ in self._inner.newest.values()), default=None)
        return moved, newest

    # ------------------------------------------------------------------ interface
    def due(self) -> bool:
        return self._clock() >= self._next_look

    def changed(self) -> bool:
        """Did anything move since the last look? (False until ``min_interval_s`` passed.)"""
        if not self.due():
            return False
        self._next_look = self._clock() + self.min_interval_s
        root = self._open_root()
        if root is None:
            return False
        try:
            moved = self._look(root, self._top)
            inner_moved, _ = self._look_inner(root)
            return moved or inner_moved
        finally:
            os.close(root)

    def changed_since(self, wall_time: float) -> bool:
        """Was any entry (top level, or in the newest subdirectory) modified after
        ``wall_time`` (seconds since the epoch)? One full look; use it sparingly."""
        threshold = int(wall_time * 1e9)
        root = self._open_root()
        if root is None:
            return False
        try:
            self._look(root, self._top, full=True)
            assert self._top.stamp is not None
            _, inner_newest = self._look_inner(root, full=True)
        finally:
            os.close(root)
        newest = max(
            [
                self._top.stamp[1],
                *(s[0] for s, _ in self._top.newest.values()),
                *([inner_newest] if inner_newest is not None else []),
            ]
        )
        return newest > threshold
