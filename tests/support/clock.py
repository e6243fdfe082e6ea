"""A monotonic clock a test moves by hand: ``clock.now += 5`` is five seconds later."""

from __future__ import annotations


class Clock:
    """Reads ``now`` (starting at 1000.0 s) until the test moves it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
