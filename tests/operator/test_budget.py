"""The drain budget's decisions (resurrect.operator.budget): a sliding window, per cluster
and per partition, idempotent for a recovery asking again, one trip per episode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from resurrect.config import IsolationSettings
from resurrect.operator.budget import grant_drains, limits_for, view
from resurrect.operator.models import (
    BudgetLimits,
    BudgetState,
    DrainCandidate,
    DrainGrant,
    DrainReservation,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HOUR = BudgetLimits(window_s=3600, cluster=2)


def ask(
    workflow_id: str, *nodes: str, limits: BudgetLimits = HOUR, partition: str | None = None
) -> DrainReservation:
    return DrainReservation(
        workflow_id=workflow_id,
        job_id=workflow_id.rsplit("/", 1)[-1],
        nodes=[DrainCandidate(name=n, partitions=[partition] if partition else []) for n in nodes],
        limits=limits,
    )


def test_limits_are_the_smaller_of_count_and_fraction() -> None:
    settings = IsolationSettings(max_drain_fraction=0.5, max_drain_nodes=2, min_drain_budget=0)
    assert limits_for(settings, 8, {}).cluster == 2
    assert limits_for(settings, 2, {}).cluster == 1
    settings = IsolationSettings(
        max_drain_fraction=1.0, partition_max_drain_nodes=3, partition_max_drain_fraction=0.25
    )
    assert limits_for(settings, 40, {"gpu": 32, "cpu": 8}).partitions == {"cpu": 2, "gpu": 3}
    assert limits_for(IsolationSettings(min_drain_budget=1), 2, {}).cluster == 1


def test_six_recoveries_against_a_budget_of_two_drain_two() -> None:
    state = BudgetState(cluster="c")
    granted: list[str] = []
    trips = 0
    for i in range(1, 7):
        state, grant = grant_drains(state, ask(f"r/{i}", f"node{i}"), T0 + timedelta(seconds=i))
        granted += grant.granted
        trips += grant.tripped
    assert granted == ["node1", "node2"]
    assert trips == 1  # operators are told once, not four times
    assert state.denied_total == 4


def test_asking_again_gets_the_same_answer_and_charges_nothing() -> None:
    state, first = grant_drains(BudgetState(cluster="c"), ask("r/1", "node1"), T0)
    state, again = grant_drains(state, ask("r/1", "node1"), T0 + timedelta(seconds=5))
    assert first.granted == again.granted == ["node1"]
    assert len(state.records) == 1


def test_an_answer_names_the_nodes_it_charged_to_the_window_for_the_first_time() -> None:
    """What lets a drain step skip asking a node's repair record whether its recovery drained
    the node before: only a node no reservation of the window named is charged anew."""
    held = [DrainCandidate(name="node9")]
    request = ask("r/1", "node1", "node9").model_copy(update={"held": held})
    state, first = grant_drains(BudgetState(cluster="c"), request, T0)
    assert first.granted == ["node1", "node9"] and first.recorded == ["node1"]
    # the same recovery asking again (its step run again), another naming the same node
    state, again = grant_drains(state, ask("r/1", "node1"), T0 + timedelta(seconds=5))
    state, other = grant_drains(state, ask("r/2", "node1", "node2"), T0 + timedelta(seconds=6))
    assert again.granted == ["node1"] and again.recorded == []
    assert other.granted == ["node1", "node2"] and other.recorded == ["node2"]
    # over the budget: denied, charged nothing
    state, denied = grant_drains(state, ask("r/3", "node3"), T0 + timedelta(seconds=7))
    assert denied.denied == ["node3"] and denied.recorded == []
    # an answer of a budget that does not say (an earlier release's) says None
    assert DrainGrant.model_validate({"granted": ["node1"]}).recorded is None


def test_the_window_slides_and_the_breaker_closes_again() -> None:
    state = BudgetState(cluster="c")
    state, _ = grant_drains(state, ask("r/1", "node1", "node2"), T0)
    state, denied = grant_drains(state, ask("r/2", "node3"), T0 + timedelta(minutes=30))
    assert denied.denied == ["node3"] and denied.tripped and state.tripped
    state, later = grant_drains(state, ask("r/3", "node3"), T0 + timedelta(minutes=61))
    assert later.granted == ["node3"] and not state.tripped
    state, again = grant_drains(state, ask("r/4", "node4", "node5"), T0 + timedelta(minutes=62))
    assert again.granted == ["node4"] and again.denied == ["node5"]
    assert again.tripped and state.trips == 2  # a new trip after the breaker had room


def test_partition_budget_is_enforced_beside_the_cluster_budget() -> None:
    limits = BudgetLimits(window_s=3600, cluster=10, partitions={"gpu": 1})
    state, grant = grant_drains(
        BudgetState(cluster="c"), ask("r/1", "g1", "g2", limits=limits, partition="gpu"), T0
    )
    assert grant.granted == ["g1"] and grant.denied == ["g2"]
    assert "partition gpu's blast-radius budget of 1 per hour" in grant.reasons[0]
    state, other = grant_drains(state, ask("r/2", "c1", limits=limits, partition="cpu"), T0)
    assert other.granted == ["c1"]


def test_an_approved_drain_goes_over_the_budget_and_says_who() -> None:
    state, _ = grant_drains(BudgetState(cluster="c"), ask("r/1", "node1", "node2"), T0)
    request = ask("r/2", "node3").model_copy(update={"approved_by": "alice"})
    state, grant = grant_drains(state, request, T0)
    assert grant.granted == ["node3"]
    assert "approved by alice" in grant.reasons[0]
    shown = view(state, T0 + timedelta(minutes=10))
    cluster = shown.scopes[0]
    assert (cluster.used, cluster.limit) == (3, 2)
    assert cluster.uses[-1].approved_by == "alice"
    assert cluster.next_free_at == T0 + timedelta(hours=1)
    assert view(state, T0 + timedelta(hours=2)).scopes[0].used == 0


def test_a_node_resurrect_still_keeps_out_counts_after_its_window() -> None:
    """Found by the 60-minute soak: node3, kept out for its lemon record long after its drain
    left the window, plus two fresh drains made three nodes out against a budget of two."""
    later = T0 + timedelta(hours=2)  # node3's drain is long out of the window
    held = [DrainCandidate(name="node3")]
    request = ask("r/2", "node6").model_copy(update={"held": held})
    state, first = grant_drains(BudgetState(cluster="c"), request, later)
    request = ask("r/3", "node2").model_copy(update={"held": held})
    state, second = grant_drains(state, request, later + timedelta(seconds=4))
    assert first.granted == ["node6"]
    assert second.denied == ["node2"] and second.tripped
    assert "cluster's blast-radius budget of 2" in second.reasons[0]


def test_a_node_already_kept_out_is_granted_without_a_second_charge() -> None:
    request = ask("r/4", "node3").model_copy(update={"held": [DrainCandidate(name="node3")]})
    state, grant = grant_drains(BudgetState(cluster="c"), request, T0)
    assert grant.granted == ["node3"] and state.records == []


def test_a_held_node_counts_only_in_its_own_partition() -> None:
    limits = BudgetLimits(window_s=3600, cluster=10, partitions={"gpu": 1, "cpu": 1})
    request = ask("r/5", "g2", limits=limits, partition="gpu")
    held = [DrainCandidate(name="c1", partitions=["cpu"])]
    _, grant = grant_drains(BudgetState(cluster="c"), request.model_copy(update={"held": held}), T0)
    assert grant.granted == ["g2"]


def test_a_burst_of_reservations_is_sent_in_updates_that_stay_under_temporals_limit() -> None:
    from resurrect.operator.budget_client import UPDATE_BYTES, _fitting
    from resurrect.operator.models import BudgetLimits, DrainCandidate, DrainReservation

    held = [DrainCandidate(name=f"b{i:05d}", partitions=["gpu"]) for i in range(500)]
    reservation = DrainReservation(
        workflow_id="recover/c/1/0",
        job_id="1",
        nodes=[DrainCandidate(name="b99999", partitions=["gpu"])],
        limits=BudgetLimits(cluster=1000, partitions={}, window_s=3600),
        held=held,
    )
    count = _fitting([reservation] * 200)
    assert 1 <= count < 200
    assert count * len(reservation.model_dump_json()) <= UPDATE_BYTES
    assert _fitting([reservation.model_copy(update={"held": held * 100})]) == 1  # never none
