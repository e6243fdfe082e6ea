"""Stragglers: named after the policy duration of being slower than peers; restart only when
the slowdown over the rest of the run costs more than a restart."""

from __future__ import annotations

import pytest

from resurrect.contracts import ProgressPolicy
from resurrect.progress.straggler import StragglerDetector, StragglerFinding, restart_decision

POLICY = ProgressPolicy(straggler_threshold=0.25, straggler_duration_s=60)


def feed(detector: StragglerDetector, seconds: int, slow_rank: int, factor: float) -> float:
    """Four ranks report a step time every second; ``slow_rank`` is ``factor`` slower."""
    for t in range(seconds):
        for rank in range(4):
            step = 1.0 * (factor if rank == slow_rank else 1.0) + 0.01 * rank
            detector.observe(rank, step, float(t), node=f"node{rank // 2 + 1}")
        finding = detector.check(float(t))
        if finding is not None:
            return float(t)
    return -1.0


def test_a_rank_slower_by_the_threshold_for_the_duration_is_named() -> None:
    detector = StragglerDetector(POLICY)
    named_at = feed(detector, 120, slow_rank=3, factor=1.5)
    assert named_at == 60.0  # slow from t=0, named once slow for the full duration
    finding = detector.check(named_at)
    assert finding is not None and (finding.rank, finding.node) == (3, "node2")
    assert finding.slowdown == pytest.approx(0.5, abs=0.03)


def test_a_small_or_brief_slowdown_is_not_a_straggler() -> None:
    assert feed(StragglerDetector(POLICY), 200, slow_rank=1, factor=1.1) == -1.0
    detector = StragglerDetector(POLICY)
    for t in range(30):  # slow for 30 s, then healthy again
        detector.observe(0, 1.0, float(t))
        detector.observe(1, 2.0, float(t))
        detector.observe(2, 1.0, float(t))
        assert detector.check(float(t)) is None
    assert detector.slow_since


def test_one_rank_alone_has_no_peers_to_lag() -> None:
    detector = StragglerDetector(POLICY)
    for t in range(100):
        detector.observe(0, 5.0, float(t))
    assert detector.check(100.0) is None


def finding(slowdown: float = 0.5, healthy: float = 2.0) -> StragglerFinding:
    detector = StragglerDetector(POLICY)
    found = None
    for t in range(61):
        detector.observe(0, healthy, float(t))
        detector.observe(1, healthy, float(t))
        detector.observe(2, healthy * (1 + slowdown), float(t), node="node9")
        found = detector.check(float(t))
    assert found is not None
    return found


def test_notify_by_default_with_the_arithmetic_in_the_note() -> None:
    decision = restart_decision(
        finding(), POLICY, remaining_steps=1000, recovery_s=120, steps_since_checkpoint=50
    )
    assert decision.action == "notify"
    # 1000 x (3.0 - 2.0) = 1000 s of slowdown against 120 + 50 x 2.0 = 220 s of restart
    assert decision.slowdown_cost_s == pytest.approx(1000)
    assert decision.restart_cost_s == pytest.approx(220)
    assert "1000 remaining steps x (3.000 - 2.000) s = 1000 s" in decision.note
    assert "straggler_action is notify" in decision.note


def test_restart_when_allowed_and_it_pays_off() -> None:
    policy = POLICY.model_copy(update={"straggler_action": "restart"})
    pays = restart_decision(
        finding(), policy, remaining_steps=1000, recovery_s=120, steps_since_checkpoint=50
    )
    assert (
        pays.action == "restart"
        and "restart (its node drained only on hardware evidence)" in pays.note
    )
    near_the_end = restart_decision(
        finding(), policy, remaining_steps=100, recovery_s=120, steps_since_checkpoint=50
    )
    assert near_the_end.action == "notify" and "cost more than it saves" in near_the_end.note


def test_unknown_remaining_run_only_notifies() -> None:
    policy = POLICY.model_copy(update={"straggler_action": "restart"})
    decision = restart_decision(
        finding(), policy, remaining_steps=None, recovery_s=1, steps_since_checkpoint=0
    )
    assert decision.action == "notify"
