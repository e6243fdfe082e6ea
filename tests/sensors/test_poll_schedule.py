"""Adaptive polling of followed jobs: fast while printing, backing off while quiet, and a
budget of looks per second for all quiet jobs together."""

from __future__ import annotations

import pytest

from resurrect.sensors.poll_schedule import AdaptiveSchedule


def schedule(budget: float = 1000.0) -> AdaptiveSchedule[str]:
    return AdaptiveSchedule(fast_s=0.05, quiet_max_s=2.0, quiet_looks_per_s=budget)


def test_a_new_job_is_looked_at_at_once_then_fast_while_it_prints() -> None:
    s = schedule()
    s.add("a", 10.0)
    assert s.due(10.0) == ["a"]
    assert s.due(10.0) == []  # taken until looked at
    s.looked("a", 10.0, changed=True)
    assert s.due(10.04) == []
    assert s.due(10.05) == ["a"]


def test_quiet_looks_back_off_to_the_maximum_and_a_change_resets() -> None:
    s = schedule()
    s.add("a", 0.0)
    now, gaps = 0.0, []
    for _ in range(8):
        [key] = s.due(now)
        s.looked(key, now, changed=False)
        nxt = s.next_due()
        assert nxt is not None
        gaps.append(round(nxt - now, 2))
        now = nxt
    assert gaps == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    s.due(now)
    s.looked("a", now, changed=True)
    assert s.next_due() == pytest.approx(now + 0.05)


def test_quiet_jobs_share_a_budget_of_looks_and_printing_ones_do_not_wait() -> None:
    s = schedule(budget=10)
    for i in range(1000):
        s.add(f"q{i}", 0.0)
    first = s.due(0.0)  # new jobs are fast: all looked at once
    for key in first:
        s.looked(key, 0.0, changed=False)
    s.add("busy", 0.0)
    looks = busy = 0
    now = 0.0
    while now < 10.0:
        now = round(now + 0.05, 2)
        for key in s.due(now):
            if key == "busy":
                busy += 1
                s.looked(key, now, changed=True)
            else:
                looks += 1
                s.looked(key, now, changed=False)
    assert looks <= 10 * 10 + 10  # the budget, not the number of quiet jobs
    assert busy >= 199  # the printing job was looked at every 50 ms throughout


def test_discarded_jobs_are_never_due() -> None:
    s = schedule()
    s.add("a", 0.0)
    s.discard("a")
    assert s.due(100.0) == [] and len(s) == 0
    s.looked("a", 1.0, changed=True)  # a late look of a dropped job is ignored
    assert len(s) == 0


def test_bad_intervals_are_refused() -> None:
    with pytest.raises(ValueError):
        AdaptiveSchedule(fast_s=1.0, quiet_max_s=0.5, quiet_looks_per_s=1)


def test_a_printing_job_that_misses_a_line_stays_fast() -> None:
    s = AdaptiveSchedule(fast_s=0.05, quiet_max_s=2.0, quiet_looks_per_s=1, active_s=10.0)
    s.add("p", 0.0)
    s.due(0.0)
    s.looked("p", 0.0, changed=True)
    s.due(0.05)
    s.looked("p", 0.05, changed=False)  # looked between two of its lines
    assert s.next_due() == pytest.approx(0.1)
    s.due(0.1)
    s.looked("p", 10.5, changed=False)  # quiet for longer than active_s: backs off
    assert s.next_due() == pytest.approx(10.6)
