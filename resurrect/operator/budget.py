"""The drain budget (circuit breaker): pure decisions over a sliding window.

One place decides whether a recovery may drain a node: :func:`decide`, called by the
per-cluster budget workflow (``workflows/drain_budget.py``) inside a synchronous Temporal
Update handler, so reservations from concurrent recoveries on several workers are applied
one at a time against one durable record. A node counts once per window however many
recoveries name it; a recovery asking again (a retried activity) gets the same answer. A
node resurrect drained that is still out (kept out for its lemon record or a failing health
check) counts as long as it is out: the budget bounds the nodes out of service at once, not
only the drains of a window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from resurrect.config import IsolationSettings
from resurrect.operator.models import (
    BudgetLimits,
    BudgetScope,
    BudgetState,
    BudgetUse,
    BudgetView,
    DrainCandidate,
    DrainGrant,
    DrainRecord,
    DrainReservation,
)

CLUSTER_SCOPE = "cluster"


def limits_for(
    settings: IsolationSettings, cluster_size: int, partition_sizes: Mapping[str, int]
) -> BudgetLimits:
    """The limits for a cluster of ``cluster_size`` nodes: the smaller of the node count
    and the fraction (``min_drain_budget`` always allowed cluster-wide)."""
    cluster = math.floor(settings.max_drain_fraction * cluster_size)
    if settings.max_drain_nodes is not None:
        cluster = min(cluster, settings.max_drain_nodes)
    cluster = max(settings.min_drain_budget, cluster)
    partitions: dict[str, int] = {}
    for name, size in sorted(partition_sizes.items()):
        caps = []
        if settings.partition_max_drain_nodes is not None:
            caps.append(settings.partition_max_drain_nodes)
        if settings.partition_max_drain_fraction is not None:
            caps.append(math.floor(settings.partition_max_drain_fraction * size))
        if caps:
            partitions[name] = min(caps)
    return BudgetLimits(window_s=settings.window_s, cluster=cluster, partitions=partitions)


def in_window(records: Iterable[DrainRecord], now: datetime, window_s: float) -> list[DrainRecord]:
    """The records still inside the window that ends now."""
    start = now - timedelta(seconds=window_s)
    return [r for r in records if r.at > start]


def _used(
    records: Sequence[DrainRecord],
    partition: str | None,
    held: Sequence[DrainCandidate] = (),
) -> set[str]:
    charged = {r.node for r in records if partition is None or partition in r.partitions}
    out = {h.name for h in held if partition is None or partition in h.partitions}
    return charged | out


def has_room(records: Sequence[DrainRecord], limits: BudgetLimits) -> bool:
    """Every scope can take one more node."""
    if len(_used(records, None)) >= limits.cluster:
        return False
    return all(len(_used(records, p)) < cap for p, cap in limits.partitions.items())


def grant_drains(
    state: BudgetState,
    request: DrainReservation,
    now: datetime,
    held: Sequence[DrainCandidate] | None = None,
) -> tuple[BudgetState, DrainGrant]:
    """Grant or deny each node of ``request`` against ``state``; the new state and answer.
    ``held``: the nodes resurrect keeps out now (None: the request's own ``held``)."""
    limits = request.limits
    records = in_window(state.records, now, limits.window_s)
    tripped = state.tripped and not has_room(records, limits)
    grant = DrainGrant()
    recorded: list[str] = []
    held = request.held if held is None else held
    held_names = {h.name for h in held}
    for candidate in request.nodes:
        node = candidate.name
        if any(r.node == node for r in records) or node in held_names:
            # this recovery's earlier answer, a node already charged in this window, or one
            # resurrect keeps out already
            grant.granted.append(node)
            continue
        over = []
        if len(_used(records, None, held)) + 1 > limits.cluster:
            over.append(
                f"cluster's blast-radius budget of {limits.cluster} per {_window(limits.window_s)}"
            )
        for partition in candidate.partitions:
            cap = limits.partitions.get(partition)
            if cap is not None and len(_used(records, partition, held)) + 1 > cap:
                over.append(
                    f"partition {partition}'s blast-radius budget of {cap}"
                    f" per {_window(limits.window_s)}"
                )
        if over and request.approved_by is None:
            grant.denied.append(node)
            grant.reasons.append(f"{node}: over the {' and '.join(over)}")
            continue
        records.append(
            DrainRecord(
                node=node,
                partitions=list(candidate.partitions),
                workflow_id=request.workflow_id,
                job_id=request.job_id,
                at=now,
                approved_by=request.approved_by if over else None,
            )
        )
        grant.granted.append(node)
        recorded.append(node)
        if over:
            grant.reasons.append(
                f"{node}: over the {' and '.join(over)}, approved by {request.approved_by}"
            )
    grant.recorded = recorded
    update: dict[str, object] = {"records": records, "limits": limits, "tripped": tripped}
    if grant.denied:
        update["denied_total"] = state.denied_total + len(grant.denied)
        if not tripped:
            grant.tripped = True
            update |= {"tripped": True, "trips": state.trips + 1, "last_trip_at": now}
    return state.model_copy(update=update), grant


def _window(window_s: float) -> str:
    if window_s % 3600 == 0:
        hours = int(window_s // 3600)
        return "hour" if hours == 1 else f"{hours} hours"
    if window_s % 60 == 0:
        return f"{int(window_s // 60)} min"
    return f"{window_s:g} s"


def view(state: BudgetState, now: datetime) -> BudgetView:
    """Each budget, what uses it and when it frees up, as of ``now``."""
    limits = state.limits
    result = BudgetView(
        cluster=state.cluster,
        tripped=state.tripped,
        trips=state.trips,
        last_trip_at=state.last_trip_at,
    )
    if limits is None:
        return result
    records = in_window(state.records, now, limits.window_s)
    window = timedelta(seconds=limits.window_s)
    scopes: list[tuple[str, str | None, int]] = [(CLUSTER_SCOPE, None, limits.cluster)]
    scopes += [(f"partition {p}", p, cap) for p, cap in sorted(limits.partitions.items())]
    for label, partition, cap in scopes:
        mine = [r for r in records if partition is None or partition in r.partitions]
        uses = [
            BudgetUse(
                node=r.node,
                job_id=r.job_id,
                workflow_id=r.workflow_id,
                at=r.at,
                frees_at=r.at + window,
                approved_by=r.approved_by,
            )
            for r in sorted(mine, key=lambda r: r.at)
        ]
        result.scopes.append(
            BudgetScope(
                scope=label,
                limit=cap,
                used=len({r.node for r in mine}),
                window_s=limits.window_s,
                uses=uses,
                next_free_at=uses[0].frees_at if uses else None,
            )
        )
    return result
