"""The adaptive, phase-aware hang decision: pure functions over a tracker and a policy.

A job is *suspected* hung when its progress stopped for longer than the allowance of the
phase it is in:

* ``startup`` (fewer than two progress lines: no rhythm yet): ``startup_s``;
* ``train``: max(``hang_floor_s``, ``hang_k`` x the usual interval between progress lines);
* ``checkpoint`` (a save line or checkpoint files changing): the train allowance, at least
  ``checkpoint_s``; files still being written keep resetting the clock;
* ``eval``: the train allowance, at least ``eval_s``.

A suspicion is then *confirmed* by the ranks' stacks (:func:`confirm_hang`): some ranks
blocked in a collective is a hang (the others, or nobody, are the culprits); every rank busy
elsewhere is not (a long unannounced phase): it is looked at again later. Without stacks, the
silence must reach ``hang_unconfirmed_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from resurrect.contracts import ProgressPolicy
from resurrect.progress.tracker import ProgressTracker, TrackedPhase


@dataclass(frozen=True, slots=True)
class HangSuspicion:
    silent_s: float
    threshold_s: float
    phase: TrackedPhase
    beat_s: float | None
    step_time_s: float | None
    last_step: int | None

    def describe(self) -> str:
        beat = f"{self.beat_s:.1f} s" if self.beat_s is not None else "unknown"
        step = f" after step {self.last_step}" if self.last_step is not None else ""
        return (
            f"no progress{step} for {self.silent_s:.1f} s in phase {self.phase}"
            f" (allowance {self.threshold_s:.1f} s; progress lines every {beat})"
        )


def allowance_s(tracker: ProgressTracker, policy: ProgressPolicy) -> float:
    """How long the job may go without progress in its current phase."""
    beat = tracker.beat_interval_s()
    if beat is None:  # no rhythm yet (start-up, warm-up, compilation)
        return policy.startup_s
    train = max(policy.hang_floor_s, policy.hang_k * beat)
    if tracker.phase == "checkpoint":
        return max(train, policy.checkpoint_s)
    if tracker.phase == "eval":
        return max(train, policy.eval_s)
    return train


def suspect_hang(
    tracker: ProgressTracker, policy: ProgressPolicy, now: float
) -> HangSuspicion | None:
    """A suspicion when progress stopped for longer than the phase allows, else None."""
    if not policy.hang_detection:
        return None
    silent = now - tracker.last_progress_at
    threshold = allowance_s(tracker, policy)
    if silent < threshold:
        return None
    return HangSuspicion(
        silent_s=silent,
        threshold_s=threshold,
        phase=tracker.phase,
        beat_s=tracker.beat_interval_s(),
        step_time_s=tracker.step_time_s,
        last_step=tracker.last_step,
    )


@dataclass(frozen=True, slots=True)
class HangConfirmation:
    hung: bool
    reason: str


def confirm_hang(
    suspicion: HangSuspicion,
    policy: ProgressPolicy,
    *,
    ranks_seen: int,
    ranks_in_collective: int,
    ranks_missing: int = 0,
) -> HangConfirmation:
    """Is a suspected job hung, given what its ranks' stacks show (``ranks_seen`` 0: none)?

    Ranks of the world that are not running at all mean a lost node or a crashed process:
    the scheduler and node sensors judge those (with the right class and the node to drain),
    so the stacks confirm nothing until ``hang_unconfirmed_s``."""
    if ranks_missing and suspicion.silent_s < policy.hang_unconfirmed_s:
        return HangConfirmation(
            False, f"{suspicion.describe()}; {ranks_missing} rank(s) not running: not judged here"
        )
    if ranks_seen and ranks_in_collective:
        if ranks_in_collective == ranks_seen:
            why = f"all {ranks_seen} ranks wait in a collective"
        else:
            why = f"{ranks_in_collective} of {ranks_seen} ranks wait in a collective"
        return HangConfirmation(True, f"{suspicion.describe()}; {why}")
    if suspicion.silent_s >= policy.hang_unconfirmed_s:
        seen = (
            "no rank's stack could be read" if not ranks_seen else "no rank waits in a collective"
        )
        return HangConfirmation(
            True,
            f"{suspicion.describe()}; {seen}, but silent past hang_unconfirmed_s"
            f" {policy.hang_unconfirmed_s:.0f} s",
        )
    if ranks_seen:
        return HangConfirmation(
            False, f"{suspicion.describe()}; all {ranks_seen} ranks busy outside collectives"
        )
    return HangConfirmation(False, f"{suspicion.describe()}; no stacks, waiting")
