"""A job attempt's progress so far, fed by parsed lines and checkpoint activity.

Progress is a new training step (the highest step any rank printed moved; a step line
without a number, such as Hugging Face's metrics dict, is a beat of its own), a line that
starts an evaluation or a checkpoint save, or the checkpoint directory changing. Other output
is not progress: ranks that are stuck can still print warnings."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from resurrect.progress.parser import ProgressEvent

TrackedPhase = Literal["startup", "train", "eval", "checkpoint"]
BEATS_KEPT = 16


@dataclass
class ProgressTracker:
    """Progress of one job attempt; times are ``time.monotonic()`` seconds."""

    started_at: float
    last_progress_at: float = 0.0
    phase: TrackedPhase = "startup"
    phase_since: float = 0.0
    last_step: int | None = None
    last_beat_at: float | None = None
    steps_seen: int = 0
    first_step_at: float | None = None
    step_time_s: float | None = None  # as printed, else derived from beats
    beats: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=BEATS_KEPT))

    def __post_init__(self) -> None:
        self.last_progress_at = self.phase_since = self.started_at

    def observe(self, event: ProgressEvent, now: float) -> bool:
        """Take one parsed line into account; True when it was progress."""
        if event.phase != "train":
            self._enter(event.phase, now)
            self.last_progress_at = now
            return True
        if event.step is not None and event.step == self.last_step:
            return False  # another rank's copy of a step already seen
        steps = 1
        if event.step is not None and self.last_step is not None and event.step > self.last_step:
            steps = event.step - self.last_step
        if self.last_beat_at is not None:
            self.beats.append((now - self.last_beat_at, steps))
        self.last_beat_at = now
        if self.first_step_at is None:
            self.first_step_at = now
        self.last_step = event.step if event.step is not None else self.last_step
        self.steps_seen += 1
        if event.step_time_s is not None:
            self.step_time_s = event.step_time_s
        elif self.beats:
            seconds = sum(b for b, _ in self.beats)
            self.step_time_s = seconds / max(1, sum(n for _, n in self.beats))
        self._enter("train", now)
        self.last_progress_at = now
        return True

    def observe_checkpoint_activity(self, now: float) -> None:
        """The checkpoint directory changed: a save is in progress (or just ended)."""
        if self.phase != "checkpoint":
            self._enter("checkpoint", now)
        self.last_progress_at = now

    def beat_interval_s(self) -> float | None:
        """The usual time between progress lines (median of the recent ones)."""
        if not self.beats:
            return None
        return statistics.median(b for b, _ in self.beats)

    def _enter(self, phase: TrackedPhase, now: float) -> None:
        if phase != self.phase:
            self.phase, self.phase_since = phase, now
