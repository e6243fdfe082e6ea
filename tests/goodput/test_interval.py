"""The expected-goodput model and its optimum, against the closed forms it generalises."""

from __future__ import annotations

import math

import pytest

from resurrect.errors import ConfigError
from resurrect.goodput.interval import (
    daly_interval,
    expected_goodput,
    nvidia_interval,
    optimal_interval,
    young_interval,
)


def test_without_interruptions_goodput_is_training_over_training_plus_saving() -> None:
    assert expected_goodput(900, 100, 1e12, 0) == pytest.approx(0.9, rel=1e-6)


def test_the_optimum_is_where_the_derivative_vanishes_and_beats_its_neighbours() -> None:
    save, mtbf, recovery = 60.0, 20_000.0, 600.0
    best = optimal_interval(save, mtbf)
    g = expected_goodput(best, save, mtbf, recovery)
    for factor in (0.8, 0.95, 1.05, 1.25):
        assert expected_goodput(best * factor, save, mtbf, recovery) < g
    # 1 - exp(-(tau + Ts)/Tf) = tau/Tf at the optimum
    assert -math.expm1(-(best + save) / mtbf) == pytest.approx(best / mtbf, rel=1e-9)


@pytest.mark.parametrize(("save", "mtbf"), [(10, 36_000), (60, 20_000), (300, 86_400)])
def test_a_short_save_agrees_with_young_and_daly(save: float, mtbf: float) -> None:
    best = optimal_interval(save, mtbf)
    assert best == pytest.approx(young_interval(save, mtbf), rel=0.1)
    assert best == pytest.approx(daly_interval(save, mtbf), rel=0.02)


def test_recovery_time_lowers_goodput_but_does_not_move_the_optimum() -> None:
    best = optimal_interval(60, 10_000)
    assert expected_goodput(best, 60, 10_000, 3600) < expected_goodput(best, 60, 10_000, 60)
    assert nvidia_interval(60, 10_000, 3600) > nvidia_interval(60, 10_000, 0)
    assert nvidia_interval(60, 10_000, 0) == pytest.approx(math.sqrt(2 * 10_000 * 60 + 3600))


def test_a_higher_rate_advises_a_shorter_interval() -> None:
    assert optimal_interval(60, 5_000) < optimal_interval(60, 50_000)


def test_free_saves_and_impossible_inputs() -> None:
    assert optimal_interval(0, 1000) == 0
    assert expected_goodput(0, 10, 1000, 10) == 0
    assert expected_goodput(10**9, 10, 1, 10) == 0  # no overflow
    with pytest.raises(ConfigError):
        optimal_interval(10, 0)
    with pytest.raises(ConfigError):
        expected_goodput(10, -1, 100, 0)
