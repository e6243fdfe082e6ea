"""Times derived from numbers a job prints, kept inside the window they belong to.

A step count or a stated duration is the job's word: multiplied by a step time it can name
any instant, including one no ``datetime`` can hold. Every such time is computed here,
clamped to the window of the attempt (or save) it describes, so a printed number can at
worst misplace a boundary inside its own attempt.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta


def shifted_within(at: datetime, seconds: float, low: datetime, high: datetime) -> datetime:
    """``at`` moved by ``seconds``, kept inside ``[low, high]`` (``at`` itself when the
    shift is not a number)."""
    if math.isnan(seconds):
        seconds = 0.0
    earliest = (low - at).total_seconds()
    latest = (high - at).total_seconds()
    return at + timedelta(seconds=min(max(seconds, earliest), max(earliest, latest)))


def seconds_within(seconds: float, low: datetime, high: datetime) -> float:
    """``seconds`` kept inside ``[0, high - low]`` (a duration cannot outlast its window)."""
    span = max(0.0, (high - low).total_seconds())
    if math.isnan(seconds):
        return 0.0
    return min(max(seconds, 0.0), span)
