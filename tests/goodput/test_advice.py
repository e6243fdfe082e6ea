"""Per-job checkpoint advice: measured save time, the cluster's rate scaled to the job's
nodes, the measured recovery time, and the interval maximising expected goodput."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from resurrect.goodput.accounting import cluster_total
from resurrect.goodput.advice import advice_lines, advice_report, advise
from resurrect.goodput.interval import expected_goodput, optimal_interval
from resurrect.goodput.model import JobGoodput
from resurrect.goodput.rates import MIN_INCIDENTS_TO_ADVISE, ClusterRates, cluster_rates
from resurrect.goodput.report import GoodputReport

from .test_rates import job


def measured(job_id: str, nodes: int, save_s: float | None, every_s: float | None) -> JobGoodput:
    accounted = job(job_id, nodes, 0, [])
    return accounted.model_copy(
        update={"save_s": save_s, "checkpoint_every_s": every_s, "saves_measured": 4}
    )


def cluster(incidents: int) -> ClusterRates:
    """One 8-node job interrupted ``incidents`` times in 1000 node-hours, 100 s per restart."""
    return cluster_rates([job("1", 8, 450_000, ["gpu.hardware"] * incidents)])


def test_the_interval_maximises_the_expected_goodput_at_the_jobs_scaled_rate() -> None:
    rates = cluster(10)  # 0.01 per node-hour
    advice = advise(measured("9", 32, 60.0, 3660.0), rates)
    mtbf = 3600 / (0.01 * 32)
    assert advice.mtbf_s == pytest.approx(mtbf, rel=1e-3)
    assert advice.advised_interval_s == pytest.approx(optimal_interval(60, mtbf), rel=1e-3)
    assert advice.current_interval_s == 3600.0
    assert advice.expected_goodput_now == pytest.approx(
        expected_goodput(3600, 60, mtbf, 100), abs=1e-4
    )
    assert advice.expected_goodput_advised is not None and advice.expected_goodput_now
    assert advice.expected_goodput_advised > advice.expected_goodput_now
    low, high = advice.advised_range_s or (0, 0)
    assert low < (advice.advised_interval_s or 0) < high  # a higher rate: a shorter interval
    assert set(advice.closed_forms_s) == {"young", "daly", "nvidia"}
    assert "10 incidents" in advice.note and "x 32 nodes" in advice.note


def test_a_bigger_job_is_advised_to_save_more_often() -> None:
    rates = cluster(10)
    small = advise(measured("9", 2, 60.0, None), rates).advised_interval_s
    big = advise(measured("9", 128, 60.0, None), rates).advised_interval_s
    assert small is not None and big is not None and big < small


def test_too_few_incidents_or_no_save_time_advise_nothing_and_say_why() -> None:
    few = advise(measured("9", 8, 60.0, 3660.0), cluster(MIN_INCIDENTS_TO_ADVISE - 1))
    assert few.advised_interval_s is None and few.incidents == MIN_INCIDENTS_TO_ADVISE - 1
    assert "too few incidents" in few.note and few.rate_per_node_hour is not None
    unsaved = advise(measured("9", 8, None, None), cluster(10))
    assert unsaved.advised_interval_s is None and "save time was not measured" in unsaved.note


def test_the_report_rests_on_every_job_and_advises_the_one_asked_about() -> None:
    jobs = [job("1", 8, 450_000, ["gpu.hardware"] * 10), measured("9", 32, 60.0, 3660.0)]
    report = GoodputReport(
        generated_at=datetime(2026, 12, 1, tzinfo=UTC),
        since=None,
        jobs=jobs,
        cluster=cluster_total(jobs),
    )
    advice = advice_report(report, "9", min_incidents=MIN_INCIDENTS_TO_ADVISE)
    assert [a.job_id for a in advice.jobs] == ["9"] and advice.rates.rate.incidents == 10
    lines = advice_lines(advice)
    assert lines[0].startswith("interruption rate: 0.01 per node-hour (95% CI 0.0048-0.0184)")
    assert "from 10 incidents in 1000 node-hours (gpu.hardware 10)" in lines[0]
    assert lines[1].startswith("recovery time (detect + recover + queue + restart to first step)")
    assert lines[-1].startswith("job 9: save every ")
