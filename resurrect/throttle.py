"""Letting something through at most once per key per window, in bounded memory.

A node agent's finding (the same rule on the same GPU) and a note about one job's bad data
(the same text about the same job) are both let through once per window however often they
recur: :class:`OncePerWindow` remembers when each key last went through.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

MAX_KEYS = 4096


class OncePerWindow(Generic[K]):
    """When each key was last let through; the key goes through again ``window_s`` later.

    Memory is bounded: past ``max_keys`` keys, those let through outside the window are
    forgotten, then the oldest (first seen first) until half of ``max_keys`` remain.
    """

    def __init__(self, window_s: float, *, max_keys: int = MAX_KEYS) -> None:
        self.window_s = window_s
        self.max_keys = max_keys
        self._at: dict[K, float] = {}

    def __len__(self) -> int:
        """How many keys are remembered."""
        return len(self._at)

    def holds_back(self, key: K, now: float) -> bool:
        """Whether ``key`` went through less than the window before ``now``."""
        last = self._at.get(key)
        return last is not None and now - last < self.window_s

    def let_through(self, key: K, now: float) -> None:
        """Remember that ``key`` went through at ``now``."""
        self._at[key] = now
        if len(self._at) > self.max_keys:  # forget the old, then the oldest
            recent = {k: t for k, t in self._at.items() if now - t < self.window_s}
            self._at = dict(list(recent.items())[-(self.max_keys // 2) :])
