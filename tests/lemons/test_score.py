"""The lemon score (resurrect/lemons/score.py), as a specification."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from resurrect.lemons.models import EvidenceTier, LemonRules, NodeIncident
from resurrect.lemons.score import OutOfService, in_service_fraction, lemon_score, out_of_service
from resurrect.operator.models import NodeEvent

NOW = datetime(2026, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)
RULES = LemonRules(half_life_s=7 * 86400, lemon_score=2.0, drain_incidents=3)


def incident(
    job: str, age: timedelta = timedelta(0), tier: EvidenceTier = "independent", n: int = 0
) -> NodeIncident:
    return NodeIncident(
        incident=f"recover/c/{job}/{n}",
        job_id=job,
        at=NOW - age,
        fault_class="gpu.hardware",
        kind="xid",
        tier=tier,
    )


def score(*incidents: NodeIncident, spells: list[OutOfService] | None = None) -> float:
    return lemon_score("n1", incidents, spells or [], NOW, RULES).score


def test_a_node_without_incidents_scores_zero() -> None:
    result = lemon_score("n1", [], [], NOW, RULES)
    assert result.score == 0 and not result.lemon and not result.drain_due


def test_each_fresh_independent_incident_of_another_job_counts_one() -> None:
    assert score(incident("1")) == pytest.approx(1.0)
    assert score(incident("1"), incident("2"), incident("3")) == pytest.approx(3.0)


def test_an_incident_counts_half_after_one_half_life_and_a_quarter_after_two() -> None:
    assert score(incident("1", 7 * DAY)) == pytest.approx(0.5)
    assert score(incident("1", 14 * DAY)) == pytest.approx(0.25)


def test_job_output_alone_weighs_nothing_however_often_it_is_printed() -> None:
    framed = [incident(str(j), tier="job_output") for j in range(100)]
    result = lemon_score("n1", framed, [], NOW, RULES)
    assert result.score == 0 and not result.lemon and not result.drain_due


def test_a_probe_only_incident_weighs_the_probe_weight() -> None:
    assert score(incident("1", tier="probe")) == pytest.approx(RULES.probe_weight)


def test_the_probe_weight_cannot_be_set_above_a_quarter() -> None:
    with pytest.raises(ValueError):
        LemonRules(probe_weight=0.5)


def test_one_job_adds_at_most_its_cap_however_often_it_fails_on_the_node() -> None:
    same_job = [incident("7", n=i) for i in range(10)]
    assert score(*same_job) == pytest.approx(RULES.per_job_cap)


def test_a_node_out_of_service_half_the_time_scores_twice_as_high() -> None:
    # the decayed weight of all time before one half-life ago is one half of all time's
    half_life = timedelta(seconds=RULES.half_life_s)
    spells = [OutOfService(NOW - 1000 * half_life, NOW - half_life)]
    assert in_service_fraction(spells, NOW, RULES.half_life_s) == pytest.approx(0.5)
    assert score(incident("1"), spells=spells) == pytest.approx(2.0)


def test_a_node_drained_all_along_is_scaled_up_only_to_the_floor() -> None:
    spells = [OutOfService(NOW - 1000 * DAY)]
    assert score(incident("1"), spells=spells) == pytest.approx(1 / RULES.min_in_service)


def test_three_fresh_incidents_of_three_jobs_make_a_lemon_due_for_draining() -> None:
    result = lemon_score("n1", [incident(j) for j in ("1", "2", "3")], [], NOW, RULES)
    assert result.lemon and result.drain_due and result.window_jobs == ["1", "2", "3"]


def test_drain_due_counts_distinct_jobs_with_independent_evidence_inside_the_window() -> None:
    old = incident("1", 8 * DAY)  # outside the 7-day window
    probe = incident("2", tier="probe")
    repeat = [incident("3", n=0), incident("3", n=1)]
    result = lemon_score("n1", [old, probe, *repeat, incident("4")], [], NOW, RULES)
    assert result.window_jobs == ["3", "4"] and not result.drain_due


def test_incidents_are_listed_newest_first_with_their_weight_and_contribution() -> None:
    result = lemon_score("n1", [incident("1", 7 * DAY), incident("2")], [], NOW, RULES)
    assert [s.incident.job_id for s in result.incidents] == ["2", "1"]
    assert [s.contribution for s in result.incidents] == pytest.approx([1.0, 0.5])


def test_an_incident_stamped_in_the_future_counts_as_new() -> None:
    assert score(incident("1", -DAY)) == pytest.approx(1.0)


def event(kind: str, age: timedelta) -> NodeEvent:
    return NodeEvent.model_validate({"at": NOW - age, "kind": kind})


def test_spells_out_of_service_come_from_the_repair_record() -> None:
    events = [
        event("drained", 10 * DAY),
        event("check_passed", 9 * DAY),
        event("returned", 9 * DAY),
        event("excluded", 5 * DAY),
        event("drained", 2 * DAY),
    ]
    assert out_of_service(events) == [
        OutOfService(NOW - 10 * DAY, NOW - 9 * DAY),
        OutOfService(NOW - 2 * DAY),
    ]
