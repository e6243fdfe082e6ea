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

Start-up, a checkpoint or an evaluation may be long, but a rank can stall in one too. Such a
phase gets an *early look* before its allowance is spent (a checkpoint or an evaluation past
the train allowance; start-up, which has no rhythm yet, after ``STARTUP_EARLY_LOOK_S``): a
suspicion that only a stopped culprit its peers wait for in a collective confirms (a rank
stopped while importing, its peers waiting at the process group's rendezvous). Anything else
is the phase doing its work, and the phase keeps its allowance: a rank busy writing while the
others wait in the barrier, a long compilation, and also every rank in a collective (an
evaluation or a sharded save running collective after collective shows the same main-thread
stacks as a deadlock).
"""

from __future__ import annotations

from dataclasses import dataclass

from resurrect.contracts import ProgressPolicy
from resurrect.progress.tracker import ProgressTracker, TrackedPhase

# Silence in start-up (no rhythm known yet) after which its early look is taken.
STARTUP_EARLY_LOOK_S = 60.0


@dataclass(frozen=True, slots=True)
class HangSuspicion:
    silent_s: float
    threshold_s: float
    phase: TrackedPhase
    beat_s: float | None
    step_time_s: float | None
    last_step: int | None
    # An early look (a checkpoint or an evaluation past the train allowance): the phase's
    # own allowance, not reached yet. None: the phase's allowance is spent.
    phase_allowance_s: float | None = None

    @property
    def early(self) -> bool:
        return self.phase_allowance_s is not None

    def describe(self) -> str:
        beat = f"{self.beat_s:.1f} s" if self.beat_s is not None else "unknown"
        step = f" after step {self.last_step}" if self.last_step is not None else ""
        allowance = f"allowance {self.threshold_s:.1f} s"
        if self.phase_allowance_s is not None:
            early = "train allowance" if self.beat_s is not None else "start-up early look"
            allowance = (
                f"{early} {self.threshold_s:.1f} s, {self.phase}"
                f" allowance {self.phase_allowance_s:.0f} s"
            )
        return (
            f"no progress{step} for {self.silent_s:.1f} s in phase {self.phase}"
            f" ({allowance}; progress lines every {beat})"
        )


def train_allowance_s(tracker: ProgressTracker, policy: ProgressPolicy) -> float | None:
    """How long training may go without progress; None until a rhythm is known."""
    beat = tracker.beat_interval_s()
    if beat is None:  # no rhythm yet (start-up, warm-up, compilation)
        return None
    return max(policy.hang_floor_s, policy.hang_k * beat)


def allowance_s(tracker: ProgressTracker, policy: ProgressPolicy) -> float:
    """How long the job may go without progress in its current phase."""
    train = train_allowance_s(tracker, policy)
    if train is None:
        return policy.startup_s
    if tracker.phase == "checkpoint":
        return max(train, policy.checkpoint_s)
    if tracker.phase == "eval":
        return max(train, policy.eval_s)
    return train


def early_look_s(tracker: ProgressTracker, policy: ProgressPolicy) -> float | None:
    """Silence after which a long phase gets its early look: the train allowance in a
    checkpoint or an evaluation, ``STARTUP_EARLY_LOOK_S`` before a rhythm is known (start-up);
    None in training, whose allowance is the train allowance itself. (An early look no
    sooner than the phase's own allowance is none: :func:`suspect_hang` skips it.)"""
    train = train_allowance_s(tracker, policy)
    if train is None:
        return STARTUP_EARLY_LOOK_S
    if tracker.phase in ("checkpoint", "eval"):
        return train
    return None


def suspect_hang(
    tracker: ProgressTracker, policy: ProgressPolicy, now: float
) -> HangSuspicion | None:
    """A suspicion when progress stopped for longer than the phase allows, or an early look
    at a long phase (:func:`early_look_s`) silent past its early look; else None."""
    if not policy.hang_detection:
        return None
    silent = now - tracker.last_progress_at
    threshold = allowance_s(tracker, policy)
    phase_allowance: float | None = None
    if silent < threshold:
        early = early_look_s(tracker, policy)
        if early is None or early >= threshold or silent < early:
            return None
        threshold, phase_allowance = early, threshold
    return HangSuspicion(
        silent_s=silent,
        threshold_s=threshold,
        phase=tracker.phase,
        beat_s=tracker.beat_interval_s(),
        step_time_s=tracker.step_time_s,
        last_step=tracker.last_step,
        phase_allowance_s=phase_allowance,
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
    culprit_stopped: bool = False,
) -> HangConfirmation:
    """Is a suspected job hung, given what its ranks' stacks show (``ranks_seen`` 0: none)?

    Ranks of the world that are not running at all mean a lost node or a crashed process:
    the scheduler and node sensors judge those (with the right class and the node to drain),
    so the stacks confirm nothing until ``hang_unconfirmed_s``. An early look confirms only
    peers waiting in a collective for a stopped culprit (``culprit_stopped``)."""
    if suspicion.early and not (culprit_stopped and ranks_in_collective > 0 and not ranks_missing):
        return HangConfirmation(
            False,
            f"{suspicion.describe()}; the {suspicion.phase} may go on: before its allowance"
            " only a stopped rank that the others wait for is a hang",
        )
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
