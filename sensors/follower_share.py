"""What one look of the log follower may spend on one job, and the cheap way through a chunk.

The follower serves every followed job in turn (round-robin, :mod:`sensors.poll_schedule`).
So that one job's output cannot delay the others' fault and hang detection, a look at a job
takes at most a :class:`FollowerShare`: ``bytes`` read, ``lines`` distinct lines looked at
and ``cpu_s`` seconds of the follower thread's CPU time (:class:`LookBudget`). What is left
over is read at the job's next look, which comes after every other due job's. A job that
falls more than ``max_behind`` bytes behind continues from its last ``resume_from`` bytes,
and the follower notes how many bytes it skipped.

Blank and repeated lines cost next to nothing: :class:`DistinctLines` splits a chunk and
drops repeats with ``bytes.split`` and ``dict.fromkeys`` (C loops), and Python code runs
only once per *distinct* line of the chunk, at most ``lines`` of them a look.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FollowerShare:
    """The most one look at one job may take, and how far behind a job may fall."""

    bytes: int = 256 << 10
    lines: int = 2000
    cpu_s: float = 0.010
    max_behind: int = 32 << 20
    resume_from: int = 8 << 20

    def describe(self) -> str:
        return (
            f"{self.bytes} bytes, {self.lines} distinct lines and"
            f" {self.cpu_s * 1000:.0f} ms of CPU a look"
        )


DEFAULT_SHARE = FollowerShare()
UNBOUNDED_CPU = FollowerShare(bytes=4 << 20, lines=1 << 30, cpu_s=math.inf)
"""A look that stops only at 4 MiB (reading one file outside the follower's loop)."""


@dataclass
class LookBudget:
    """What is left of one job's share during one look."""

    share: FollowerShare = DEFAULT_SHARE
    clock: Callable[[], float] = time.thread_time
    bytes_left: int = field(init=False)
    lines_left: int = field(init=False)
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.bytes_left = self.share.bytes
        self.lines_left = self.share.lines
        self.deadline = self.clock() + self.share.cpu_s

    def cpu_spent(self) -> bool:
        return self.clock() >= self.deadline

    def spent(self) -> bool:
        return self.bytes_left <= 0 or self.lines_left <= 0 or self.cpu_spent()


class DistinctLines:
    """Walks the distinct lines of a chunk of complete lines (each ending in a newline) in
    order of first appearance. Splitting and dropping repeats are C loops over the whole
    chunk; each :meth:`advance` then costs one substring search from the previous line on,
    so Python code runs once per distinct line walked, and only as far as it is walked."""

    def __init__(self, chunk: bytes) -> None:
        # the empty piece after the last newline is among the keys: where no line is blank,
        # it is never found and so skipped
        self._keys = iter(dict.fromkeys(chunk.split(b"\n")))
        self._haystack = b"\n" + chunk  # every line, the first too, has a newline before it
        self._position = 0  # haystack index of the newline before the last line walked
        self._index = 0

    def advance(self) -> tuple[int, int, bytes] | None:
        """The next distinct line as (its first byte in the chunk, its 0-based line number
        in the chunk, its bytes), blank ones included; None at the end."""
        for key in self._keys:
            at = self._haystack.find(b"\n" + key + b"\n", self._position)
            if at < 0:
                continue
            self._index += self._haystack.count(b"\n", self._position + 1, at + 1)
            self._position = at
            return at, self._index, key
        return None
