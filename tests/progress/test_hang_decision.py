"""Adaptive, phase-aware hang decisions: pure functions over a tracker and a policy."""

from __future__ import annotations

from resurrect.contracts import ProgressPolicy
from resurrect.progress.hang import STARTUP_EARLY_LOOK_S, allowance_s, confirm_hang, suspect_hang
from resurrect.progress.parser import ProgressEvent
from resurrect.progress.tracker import ProgressTracker

POLICY = ProgressPolicy()


def step(n: int, rank: int | None = None) -> ProgressEvent:
    return ProgressEvent("plain.step_loss", "plain", "train", step=n, rank=rank)


def trained(steps: int, every_s: float, start: float = 0.0) -> tuple[ProgressTracker, float]:
    """A tracker fed one progress line every ``every_s`` seconds, by two ranks each."""
    tracker = ProgressTracker(started_at=start)
    now = start
    for n in range(1, steps + 1):
        now += every_s
        assert tracker.observe(step(10 * n, rank=0), now)
        assert not tracker.observe(step(10 * n, rank=1), now)  # the same step again
    return tracker, now


def test_silence_past_k_times_the_usual_interval_is_suspected() -> None:
    tracker, last = trained(5, every_s=4.0)
    assert tracker.beat_interval_s() == 4.0
    assert tracker.step_time_s == 0.4  # 10 steps per line
    assert allowance_s(tracker, POLICY) == 12.0  # 3 x 4 s
    assert suspect_hang(tracker, POLICY, last + 11.9) is None
    suspicion = suspect_hang(tracker, POLICY, last + 12.0)
    assert suspicion is not None and suspicion.phase == "train" and suspicion.last_step == 50


def test_a_fast_job_is_held_to_the_floor() -> None:
    tracker, last = trained(5, every_s=0.2)
    assert allowance_s(tracker, POLICY) == POLICY.hang_floor_s
    assert suspect_hang(tracker, POLICY, last + POLICY.hang_floor_s - 0.1) is None


def test_start_up_gets_its_own_allowance_until_a_rhythm_is_known() -> None:
    tracker = ProgressTracker(started_at=100.0)
    assert suspect_hang(tracker, POLICY, 100.0 + STARTUP_EARLY_LOOK_S - 0.1) is None
    early = suspect_hang(tracker, POLICY, 100.0 + POLICY.startup_s - 1)
    assert early is not None and early.early  # only an early look until the allowance
    late = suspect_hang(tracker, POLICY, 100.0 + POLICY.startup_s)
    assert late is not None and not late.early
    tracker.observe(step(1), 200.0)  # one line: still no rhythm
    assert allowance_s(tracker, POLICY) == POLICY.startup_s


def test_a_silent_start_up_gets_an_early_look_that_only_a_stopped_rank_confirms() -> None:
    """A rank stopped while importing, its peer waiting at the rendezvous, is a hang long
    before start-up's allowance; a long compilation (every rank busy) is not."""
    tracker = ProgressTracker(started_at=0.0)
    early = suspect_hang(tracker, POLICY, STARTUP_EARLY_LOOK_S)
    assert early is not None and early.early
    assert (early.threshold_s, early.phase_allowance_s) == (STARTUP_EARLY_LOOK_S, POLICY.startup_s)
    assert "start-up early look 60.0 s, startup allowance 1800 s" in early.describe()
    waiting_for_a_stopped_rank = confirm_hang(
        early, POLICY, ranks_seen=2, ranks_in_collective=1, culprit_stopped=True
    )
    assert waiting_for_a_stopped_rank.hung
    assert not confirm_hang(early, POLICY, ranks_seen=2, ranks_in_collective=0).hung
    assert not confirm_hang(early, POLICY, ranks_seen=0, ranks_in_collective=0).hung


def test_a_short_start_up_allowance_is_its_own_early_look() -> None:
    policy = ProgressPolicy(startup_s=60.0)
    tracker = ProgressTracker(started_at=0.0)
    suspicion = suspect_hang(tracker, policy, 60.0)
    assert suspicion is not None and not suspicion.early


def test_no_false_hang_during_a_checkpoint_save_ten_times_longer_than_a_step() -> None:
    tracker, last = trained(5, every_s=2.0)
    tracker.observe_checkpoint_activity(last + 0.5)  # the save starts writing files
    assert tracker.phase == "checkpoint"
    # the save takes 10 steps' time (and more) with no new files for a while
    early = suspect_hang(tracker, POLICY, last + 0.5 + 10 * 2.0)
    assert early is not None and early.early  # an early look, which only a stall confirms
    busy = confirm_hang(early, POLICY, ranks_seen=2, ranks_in_collective=1)
    assert not busy.hung and "the checkpoint may go on" in busy.reason
    late = suspect_hang(tracker, POLICY, last + 0.5 + POLICY.checkpoint_s - 1)
    assert late is not None and late.early
    spent = suspect_hang(tracker, POLICY, last + 0.5 + POLICY.checkpoint_s)
    assert spent is not None and not spent.early
    assert confirm_hang(spent, POLICY, ranks_seen=2, ranks_in_collective=1).hung
    tracker.observe(step(60), last + 30)  # the next step: back to the train allowance
    assert tracker.phase == "train" and allowance_s(tracker, POLICY) == 6.0


def test_a_save_line_and_an_evaluation_line_give_their_allowances() -> None:
    tracker, last = trained(5, every_s=2.0)
    tracker.observe(ProgressEvent("r", "t", "eval"), last + 1)
    assert allowance_s(tracker, POLICY) == POLICY.eval_s
    tracker.observe(ProgressEvent("r", "t", "checkpoint"), last + 2)
    assert allowance_s(tracker, POLICY) == POLICY.checkpoint_s


def test_a_step_counter_that_restarts_is_progress() -> None:
    tracker, last = trained(3, every_s=1.0)
    assert tracker.observe(step(1), last + 1.0)  # a new epoch's bar starts again at 1


def test_detection_can_be_switched_off_by_policy() -> None:
    tracker, last = trained(5, every_s=1.0)
    off = ProgressPolicy(hang_detection=False)
    assert suspect_hang(tracker, off, last + 10_000) is None


def test_stacks_confirm_or_dismiss_a_suspicion() -> None:
    tracker, last = trained(5, every_s=1.0)
    suspicion = suspect_hang(tracker, POLICY, last + 6)
    assert suspicion is not None
    waiting = confirm_hang(suspicion, POLICY, ranks_seen=4, ranks_in_collective=3)
    assert waiting.hung and "3 of 4 ranks wait" in waiting.reason
    assert confirm_hang(suspicion, POLICY, ranks_seen=4, ranks_in_collective=4).hung
    busy = confirm_hang(suspicion, POLICY, ranks_seen=4, ranks_in_collective=0)
    assert not busy.hung and "busy" in busy.reason
    assert not confirm_hang(suspicion, POLICY, ranks_seen=0, ranks_in_collective=0).hung


def test_without_stacks_only_a_long_silence_is_a_hang() -> None:
    tracker, last = trained(5, every_s=1.0)
    late = suspect_hang(tracker, POLICY, last + POLICY.hang_unconfirmed_s)
    assert late is not None
    verdict = confirm_hang(late, POLICY, ranks_seen=0, ranks_in_collective=0)
    assert verdict.hung and "hang_unconfirmed_s" in verdict.reason


def test_missing_ranks_leave_the_verdict_to_the_node_and_scheduler_sensors() -> None:
    tracker, last = trained(5, every_s=1.0)
    suspicion = suspect_hang(tracker, POLICY, last + 6)
    assert suspicion is not None
    gone = confirm_hang(suspicion, POLICY, ranks_seen=1, ranks_in_collective=1, ranks_missing=1)
    assert not gone.hung and "not running" in gone.reason
    late = suspect_hang(tracker, POLICY, last + POLICY.hang_unconfirmed_s)
    assert late is not None
    assert confirm_hang(late, POLICY, ranks_seen=1, ranks_in_collective=1, ranks_missing=1).hung


def test_a_long_phase_gets_an_early_look_after_the_train_allowance() -> None:
    tracker, last = trained(5, every_s=2.0)  # train allowance 6 s
    tracker.observe(ProgressEvent("r", "t", "eval"), last + 1)
    assert suspect_hang(tracker, POLICY, last + 1 + 5.9) is None
    early = suspect_hang(tracker, POLICY, last + 1 + 6.0)
    assert early is not None and early.early
    assert (early.threshold_s, early.phase_allowance_s) == (6.0, POLICY.eval_s)
    assert "train allowance 6.0 s, eval allowance" in early.describe()


def test_an_early_look_confirms_only_a_stopped_culprit_its_peers_wait_for() -> None:
    tracker, last = trained(5, every_s=1.0)
    tracker.observe_checkpoint_activity(last + 0.5)
    early = suspect_hang(tracker, POLICY, last + 0.5 + POLICY.hang_floor_s)
    assert early is not None and early.early

    def hung(seen: int, waiting: int, *, missing: int = 0, stopped: bool = False) -> bool:
        return confirm_hang(
            early,
            POLICY,
            ranks_seen=seen,
            ranks_in_collective=waiting,
            ranks_missing=missing,
            culprit_stopped=stopped,
        ).hung

    assert hung(2, 1, stopped=True)
    assert not hung(4, 3)  # rank 0 writing the checkpoint, the others wait for it
    assert not hung(4, 4)  # a sharded save or an evaluation, collective after collective
    assert not hung(1, 0, stopped=True)  # nobody waits for the stopped rank
    assert not hung(1, 1, missing=1, stopped=True)  # a rank gone: the node sensors judge
    assert not hung(0, 0)
