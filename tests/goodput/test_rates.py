"""The interruption rate per node-hour, its exact interval, and what counts as an incident."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from resurrect.goodput.model import JobGoodput, Part, RecoveryCost
from resurrect.goodput.rates import (
    MIN_INCIDENTS_TO_ADVISE,
    cluster_rates,
    garwood_interval,
    rate_per_node_hour,
)


@pytest.mark.parametrize(
    ("k", "low", "high"),
    # published exact 95 % limits (e.g. Ulm 1990, table of chi-square quantiles / 2)
    [(0, 0.0, 3.689), (1, 0.0253, 5.572), (5, 1.6235, 11.668), (20, 12.217, 30.889)],
)
def test_garwood_limits_match_the_tables(k: int, low: float, high: float) -> None:
    got_low, got_high = garwood_interval(k)
    assert got_low == pytest.approx(low, abs=2e-3)
    assert got_high == pytest.approx(high, abs=2e-3)


def test_the_rate_is_incidents_over_node_hours_with_its_interval() -> None:
    estimate = rate_per_node_hour(4, 2000.0)
    assert estimate.per_node_hour == 0.002
    assert estimate.low is not None and estimate.high is not None
    assert estimate.low < 0.002 < estimate.high
    assert rate_per_node_hour(3, 0).per_node_hour is None


def job(job_id: str, nodes: int | None, wall_s: float, classes: list[str]) -> JobGoodput:
    recoveries = [
        RecoveryCost(
            workflow_id=f"recover/c/{job_id}/{i}",
            attempt=i,
            fault_class=fault,
            outcome="recovered" if fault != "app.error" else "stopped",
            lost_s={"detection": 10, "recovery": 20, "queue": 30, "startup": 40, "recompute": 99},
        )
        for i, fault in enumerate(classes)
    ]
    return JobGoodput(
        cluster="c",
        job_id=job_id,
        state="RUNNING",
        start=datetime(2026, 11, 1, tzinfo=UTC),
        end=None,
        wall_s=wall_s,
        since_submit_s=None,
        goodput=None,
        ettr=None,
        step_time_s=None,
        parts={"productive": Part(seconds=0, basis="measured")},
        recoveries=recoveries,
        nodes=nodes,
    )


def test_exposure_counts_uninterrupted_jobs_and_code_faults_are_not_incidents() -> None:
    rates = cluster_rates(
        [
            job("1", 4, 36_000, ["gpu.hardware", "node.lost", "app.error"]),
            job("2", 16, 36_000, []),  # never interrupted: still node-hours at risk
            job("3", None, 36_000, ["node.lost"]),  # node count unknown: not counted
        ]
    )
    assert rates.rate.node_hours == 200.0
    assert rates.rate.incidents == 2 and rates.by_class == {"gpu.hardware": 1, "node.lost": 1}
    assert rates.rate.per_node_hour == 0.01
    assert rates.recovery_s == 100.0  # detection + recovery + queue + startup, not recompute
    assert rates.recoveries_timed == 2
    assert not rates.enough and MIN_INCIDENTS_TO_ADVISE > 2
