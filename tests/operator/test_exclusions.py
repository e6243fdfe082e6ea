"""Exclusions that do not pile up (resurrect.operator.exclusions.plan_exclusions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from resurrect.operator.exclusions import plan_exclusions

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_a_node_back_in_service_is_removed_and_the_new_culprit_added() -> None:
    plan = plan_exclusions(
        job_id="7",
        current=["n1", "n2"],
        adding=["n3"],
        ours={"n1": at(0), "n2": at(5)},
        returned={"n1": at(30)},
        usable=["n1", "n4", "n5", "n6"],
        needed=2,
    )
    assert plan.exclude == ["n2", "n3"] and plan.dropped == ["n1"]
    assert "back in service" in plan.notes[0]


def test_a_return_before_the_exclusion_does_not_count() -> None:
    plan = plan_exclusions(
        job_id="7",
        current=["n1"],
        adding=[],
        ours={"n1": at(10)},
        returned={"n1": at(5)},
        usable=["n2", "n3"],
        needed=1,
    )
    assert plan.exclude == ["n1"] and plan.dropped == []


def test_the_owners_exclusions_and_the_current_culprit_are_never_removed() -> None:
    plan = plan_exclusions(
        job_id="7",
        current=["mine", "n1"],
        adding=["n1"],
        ours={"n1": at(0)},
        returned={"n1": at(10)},
        usable=["mine", "n1"],
        needed=2,
    )
    assert plan.exclude == ["mine", "n1"] and plan.dropped == []


def test_the_oldest_of_ours_go_first_when_the_job_would_not_fit() -> None:
    plan = plan_exclusions(
        job_id="7",
        current=["n1", "n2", "n3"],
        adding=["n4"],
        ours={"n1": at(20), "n2": at(0), "n3": at(10)},
        returned={},
        usable=["n1", "n2", "n3", "n5"],
        needed=3,
    )
    assert plan.dropped == ["n2", "n3"]
    assert plan.exclude == ["n1", "n4"]
    assert all("fewer than its 3 nodes" in note for note in plan.notes)
