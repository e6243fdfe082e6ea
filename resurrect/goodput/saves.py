"""How long a job's checkpoint saves take and how often it saves, from its own output lines.

A save's duration is, in order of preference: the seconds a done line states (``Finished
saving the checkpoint ... in 3.00 seconds``); the done line's time minus the start line
before it (``saving checkpoint at iteration 100``); the done line's time minus the progress
mark of the step it saved (the example job prints ``step 40/120`` then saves then prints
``checkpoint .../step_40``), moved forward by the measured step time when the last mark was
of an earlier step. Each is bounded by the save's window (no longer than the time since its
attempt started, the earliest thing known of it, however many seconds or steps the job
printed); the median of all is the job's save time.

The spacing between saves is the median time between consecutive done lines, with no
resume between them (a restart is not a checkpoint interval).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from resurrect.goodput.model import ProgressMark, SaveMark
from resurrect.goodput.window import seconds_within, shifted_within


@dataclass(frozen=True)
class SaveTimes:
    save_s: float | None  # median save (blocking) time
    every_s: float | None  # median time from one save's end to the next
    measured: int  # saves whose duration was measured


def save_durations(
    saves: Sequence[SaveMark],
    marks: Sequence[ProgressMark],
    seconds_per_step: float | None,
    attempt_starts: Sequence[datetime] = (),
) -> list[float]:
    """The duration of each completed save (seconds), in the order they ended, each within
    its window: from the start of its attempt (or the earliest line read) to its end."""
    ordered_marks = sorted(marks, key=lambda m: m.at)
    ordered_saves = sorted(saves, key=lambda s: s.at)
    known = [*attempt_starts, *(m.at for m in ordered_marks), *(s.at for s in ordered_saves)]
    durations: list[float] = []
    opened: datetime | None = None
    for save in ordered_saves:
        if not save.done:
            opened = save.at
            continue
        started = opened
        opened = None
        window_start = max(
            (t for t in attempt_starts if t <= save.at), default=min(known, default=save.at)
        )
        if save.stated_s is not None:
            durations.append(seconds_within(save.stated_s, window_start, save.at))
            continue
        if started is None:
            started = _mark_time(ordered_marks, save, seconds_per_step)
        if started is not None:
            durations.append(
                seconds_within((save.at - started).total_seconds(), window_start, save.at)
            )
    return durations


def _mark_time(
    marks: Sequence[ProgressMark], save: SaveMark, seconds_per_step: float | None
) -> datetime | None:
    """When the step saved was done: the last mark before the save ended, moved on by the
    step time for the steps between it and the step saved."""
    before = [m for m in marks if m.at <= save.at and (save.step is None or m.step <= save.step)]
    if not before:
        return None
    last = before[-1]
    if save.step is None or save.step == last.step:
        return last.at
    if seconds_per_step is None:
        return None
    return shifted_within(last.at, (save.step - last.step) * seconds_per_step, last.at, save.at)


def save_spacing(saves: Sequence[SaveMark], resumes_at: Sequence[datetime]) -> list[float]:
    """Seconds between consecutive save ends that no resume separates."""
    ends = sorted(s.at for s in saves if s.done)
    spacing: list[float] = []
    for before, after in itertools.pairwise(ends):
        if any(before < resumed <= after for resumed in resumes_at):
            continue
        seconds = (after - before).total_seconds()
        if seconds > 0:
            spacing.append(seconds)
    return spacing


def save_times(
    saves: Sequence[SaveMark],
    marks: Sequence[ProgressMark],
    resumes_at: Sequence[datetime],
    seconds_per_step: float | None,
) -> SaveTimes:
    """The job's median save time and median spacing between saves (None: not measured)."""
    durations = save_durations(saves, marks, seconds_per_step, resumes_at)
    spacing = save_spacing(saves, resumes_at)
    return SaveTimes(
        save_s=round(statistics.median(durations), 3) if durations else None,
        every_s=round(statistics.median(spacing), 3) if spacing else None,
        measured=len(durations),
    )
