"""The soak's schedule is a pure function of its seed (benchmarks/chaos/schedule.py)."""

from __future__ import annotations

import itertools

import pytest

from benchmarks.chaos.faults import KINDS
from benchmarks.chaos.schedule import Injection, build_schedule, kinds_named


def test_the_same_seed_injects_the_same_faults_at_the_same_offsets() -> None:
    assert build_schedule(7, 1800) == build_schedule(7, 1800)


def test_another_seed_gives_another_schedule() -> None:
    assert build_schedule(7, 1800) != build_schedule(8, 1800)


def test_the_first_injections_cover_every_kind_once() -> None:
    schedule = build_schedule(3, 3600, mean_gap_s=10)
    assert sorted(i.kind for i in schedule[: len(KINDS)]) == sorted(k.name for k in KINDS)


def test_nothing_is_injected_in_the_warm_up_or_the_settling_tail() -> None:
    schedule = build_schedule(11, 600, warmup_s=60, settle_s=90)
    assert schedule
    assert all(60 < i.offset_s < 600 - 90 for i in schedule)
    offsets = [i.offset_s for i in schedule]
    assert offsets == sorted(offsets)
    assert [i.index for i in schedule] == list(range(len(schedule)))


def test_a_soak_too_short_for_its_warm_up_injects_nothing() -> None:
    assert build_schedule(1, 50, warmup_s=30, settle_s=30) == []


def test_faults_overlap_gaps_are_often_shorter_than_a_recovery() -> None:
    offsets = [i.offset_s for i in build_schedule(5, 3600, mean_gap_s=20)]
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert sum(1 for g in gaps if g < 15) > len(gaps) / 4


def test_only_the_kinds_asked_for_are_drawn() -> None:
    chosen = kinds_named(["node_loss", "worker_kill"])
    assert {i.kind for i in build_schedule(2, 900, kinds=chosen)} == {"node_loss", "worker_kill"}
    with pytest.raises(ValueError, match="no_such_kind"):
        kinds_named(["no_such_kind"])


def test_a_pick_chooses_the_same_target_whatever_order_the_candidates_come_in() -> None:
    injection = Injection(offset_s=1.0, kind="node_loss", pick=0.5, index=0)
    assert injection.choose(["12", "3", "7", "10"]) == injection.choose(["10", "7", "3", "12"])
    assert injection.choose(["3", "7", "10", "12"]) == "10"  # numeric, not text, order
    assert injection.choose([]) is None
    assert Injection(1.0, "x", 0.999999, 0).choose(["a", "b"]) == "b"
