"""When to look at each followed job again: fast while it prints, backing off while quiet,
and a fixed budget of looks per second for all quiet jobs together.

A job whose output changed in the last ``active_s`` seconds is printing: it is looked at
every ``fast_s``. A quiet job's interval doubles at each look that finds nothing, up to
``quiet_max_s``, and looks at quiet jobs are also limited to ``quiet_looks_per_s`` in total
(a printing job never waits behind them), so the file-system operations the
follower makes follow the jobs that print, not the number of jobs that are quiet (with
many quiet jobs each one is looked at every ``len(quiet) / quiet_looks_per_s`` seconds
when that is longer than ``quiet_max_s``).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class _Entry:
    due: float
    interval: float
    version: int = 0
    last_change: float = float("-inf")


class AdaptiveSchedule(Generic[K]):  # (3.11: no type parameter syntax)
    """Due times per key; :meth:`due` pops what to look at now, :meth:`looked` records it."""

    def __init__(
        self,
        *,
        fast_s: float,
        quiet_max_s: float,
        quiet_looks_per_s: float,
        active_s: float = 3.0,
    ) -> None:
        if not 0 < fast_s <= quiet_max_s:
            raise ValueError("need 0 < fast_s <= quiet_max_s")
        self.fast_s = fast_s
        self.active_s = active_s
        self.quiet_max_s = quiet_max_s
        self.quiet_looks_per_s = quiet_looks_per_s
        self._entries: dict[K, _Entry] = {}
        self._heap: list[tuple[float, int, int, K]] = []
        self._tokens = quiet_looks_per_s
        self._refilled: float | None = None
        self._counter = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def add(self, key: K, now: float) -> None:
        """Start scheduling ``key``: looked at now, then as fast as a printing job."""
        if key not in self._entries:
            self._entries[key] = _Entry(due=now, interval=self.fast_s)
            self._push(key, now)

    def discard(self, key: K) -> None:
        self._entries.pop(key, None)  # its heap items are skipped when popped

    def _push(self, key: K, due: float) -> None:
        entry = self._entries[key]
        entry.due = due
        entry.version += 1
        self._counter += 1
        heapq.heappush(self._heap, (due, self._counter, entry.version, key))
        if len(self._heap) > 4 * len(self._entries) + 64:
            self._heap = [
                (e.due, i, e.version, k) for i, (k, e) in enumerate(self._entries.items())
            ]
            heapq.heapify(self._heap)

    def _refill(self, now: float) -> None:
        if self._refilled is not None:
            self._tokens = min(
                self.quiet_looks_per_s,
                self._tokens + (now - self._refilled) * self.quiet_looks_per_s,
            )
        self._refilled = now

    def due(self, now: float) -> list[K]:
        """The keys to look at now: every fast one that is due, and as many due quiet ones
        as the budget allows (the others stay due, oldest first)."""
        self._refill(now)
        ready: list[K] = []
        deferred: list[tuple[float, int, int, K]] = []
        while self._heap and self._heap[0][0] <= now + 1e-9:
            item = heapq.heappop(self._heap)
            _, _, version, key = item
            entry = self._entries.get(key)
            if entry is None or entry.version != version:
                continue
            if entry.interval > self.fast_s:
                if self._tokens < 1:
                    deferred.append(item)
                    continue
                self._tokens -= 1
            ready.append(key)
            entry.due = float("inf")  # until looked() schedules it again
        for item in deferred:
            heapq.heappush(self._heap, item)
        return ready

    def looked(self, key: K, now: float, *, changed: bool) -> None:
        """Record a look: a job that printed lately stays fast; a quiet one backs off."""
        entry = self._entries.get(key)
        if entry is None:
            return
        if changed:
            entry.last_change = now
        if now - entry.last_change < self.active_s:
            entry.interval = self.fast_s
        else:
            entry.interval = min(entry.interval * 2, self.quiet_max_s)
        self._push(key, now + entry.interval)

    def next_due(self) -> float | None:
        """The earliest due time (stale entries may make it early: harmless)."""
        return self._heap[0][0] if self._heap else None
