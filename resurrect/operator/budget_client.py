"""The drain step's calls to the cluster's DrainBudgetWorkflow: reservations batched into
``reserve_drains_census`` updates (update-with-start: the first drain of a cluster starts
it), with limits sized to the cluster's shape (read at most once a minute), counted against
the census of the nodes resurrect keeps out (read at most every ``HELD_MAX_AGE_S``, and sent
to the budget once per read, not with every reservation), and reading the budget's state."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from resurrect.config import ResurrectConfig
from resurrect.contracts import NodeInfo
from resurrect.contracts.workflow_ids import drain_budget_workflow_id
from resurrect.contracts.workflow_names import (
    BUDGET_QUERY,
    CENSUS_NOT_KEPT,
    DRAIN_BUDGET_WORKFLOW,
    RESERVE_DRAINS_CENSUS_UPDATE,
)
from resurrect.errors import ResurrectError
from resurrect.operator.budget import grant_drains, limits_for
from resurrect.operator.models import (
    BudgetState,
    CensusReservations,
    DrainCandidate,
    DrainGrant,
    DrainRecord,
    DrainReservation,
    HeldCensus,
)
from resurrect.operator.task_queues import (
    budget_task_queue,
    on_operator_queue,
    query_operator_workflow,
    runs_on_operator_queue,
)
from resurrect.scheduler.base import DRAIN_REASON_PREFIX, Scheduler

log = logging.getLogger(__name__)

# Reservations refused because too many updates are in flight are tried again this often.
RESERVE_ATTEMPTS = 200
RESERVE_AGAIN = frozenset(
    {RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.ABORTED, RPCStatusCode.UNAVAILABLE}
)
# At most this many reservations in one update, and about this many bytes: the workflow's
# acceptance of an update carries its input back, and Temporal refuses a workflow task whose
# payloads pass 2 MiB (the budget workflow would be stuck). A reservation is a few hundred
# bytes; the census of held nodes, when an update carries it, ~35 bytes a node.
RESERVATIONS_PER_UPDATE = 200
UPDATE_BYTES = 512 * 1024


@dataclass(frozen=True)
class ClusterShape:
    """How many nodes the cluster has, in all and in each partition (what drain budgets are
    fractions of)."""

    nodes: int
    partitions: dict[str, int]


_T = TypeVar("_T")


class _PerScheduler(Generic[_T]):
    """One value per scheduler, read again once it is older than ``max_age_s``. Callers that
    ask while a read is under way share it: a burst of recoveries, each drain step asking at
    once with the value stale, costs one read, not one per recovery."""

    def __init__(self, max_age_s: float, read: Callable[[Scheduler], Awaitable[_T]]) -> None:
        self.max_age_s = max_age_s
        self._read = read
        self._values: weakref.WeakKeyDictionary[Scheduler, tuple[float, _T]] = (
            weakref.WeakKeyDictionary()
        )
        self._reading: weakref.WeakKeyDictionary[Scheduler, asyncio.Future[_T]] = (
            weakref.WeakKeyDictionary()
        )

    async def get(self, scheduler: Scheduler) -> _T:
        cached = self._values.get(scheduler)
        if cached is not None and time.monotonic() - cached[0] < self.max_age_s:
            return cached[1]
        reading = self._reading.get(scheduler)
        if reading is None or reading.get_loop() is not asyncio.get_running_loop():
            reading = asyncio.ensure_future(self._read_and_keep(scheduler))
            self._reading[scheduler] = reading
        # a caller cancelled (its activity timed out) leaves the read to the others
        return await asyncio.shield(reading)

    async def _read_and_keep(self, scheduler: Scheduler) -> _T:
        try:
            value = await self._read(scheduler)
            self._values[scheduler] = (time.monotonic(), value)
            return value
        finally:
            self._reading.pop(scheduler, None)


async def _read_shape(scheduler: Scheduler) -> ClusterShape:
    return shape_of(await scheduler.list_nodes())


async def _read_held(scheduler: Scheduler) -> HeldCensus:
    read_at = datetime.now(UTC)
    _, drained = await scheduler.drain_census()
    return HeldCensus(read_at=read_at, nodes=held_by_resurrect(drained))


# A cluster's shape changes when nodes are added or partitions redrawn, not per recovery: one
# full read per process per minute instead of one per drain (every node of a 10,000-node
# cluster for each recovery of a burst).
SHAPE_MAX_AGE_S = 60.0
_SHAPES = _PerScheduler(SHAPE_MAX_AGE_S, _read_shape)
# Which nodes resurrect keeps out changes with drains and returns; the budget's own records
# cover the drains of its window, so a census a few seconds old only errs on the safe side
# (a node just returned still counts).
HELD_MAX_AGE_S = 10.0
_HELD = _PerScheduler(HELD_MAX_AGE_S, _read_held)


async def cluster_shape(scheduler: Scheduler) -> ClusterShape:
    """The cluster's node counts, read at most once a minute (``SHAPE_MAX_AGE_S``)."""
    return await _SHAPES.get(scheduler)


async def held_now(scheduler: Scheduler) -> HeldCensus:
    """The nodes resurrect keeps out now, read at most every ``HELD_MAX_AGE_S`` seconds."""
    return await _HELD.get(scheduler)


def shape_of(nodes: Collection[NodeInfo]) -> ClusterShape:
    """The shape of a cluster of ``nodes``."""
    partitions: dict[str, int] = {}
    for node in nodes:
        for partition in node.partitions:
            partitions[partition] = partitions.get(partition, 0) + 1
    return ClusterShape(nodes=len(nodes), partitions=partitions)


def held_by_resurrect(nodes: Collection[NodeInfo]) -> list[DrainCandidate]:
    """The nodes of ``nodes`` that resurrect drained and that are still out of service."""
    return [
        DrainCandidate(name=n.name, partitions=list(n.partitions))
        for n in nodes
        if n.drained and n.reason.startswith(DRAIN_REASON_PREFIX)
    ]


def reservation_for(
    config: ResurrectConfig,
    *,
    workflow_id: str,
    job_id: str,
    wanted: Sequence[str],
    nodes: Sequence[NodeInfo],
    shape: ClusterShape,
    approved_by: str | None = None,
) -> DrainReservation:
    """The reservation of ``wanted`` nodes (``nodes``: how the scheduler shows them, for
    their partitions), with the limits of a cluster of ``shape``."""
    by_name = {n.name: n for n in nodes}
    return DrainReservation(
        workflow_id=workflow_id,
        job_id=job_id,
        nodes=[
            DrainCandidate(name=n, partitions=list(by_name[n].partitions) if n in by_name else [])
            for n in wanted
        ],
        limits=limits_for(config.isolation, shape.nodes, shape.partitions),
        approved_by=approved_by,
    )


async def reserve_drains(
    client: Client | None,
    config: ResurrectConfig,
    request: DrainReservation,
    scheduler: Scheduler,
    *,
    observe: bool,
) -> DrainGrant:
    """Ask the cluster's budget workflow; in observe mode, ask without reserving. The nodes
    resurrect keeps out count against the budget: their census is read here (at most every
    ``HELD_MAX_AGE_S``) and given to the budget once per read (``request.held`` is not sent).

    Without a Temporal client (a step run in a unit test) the budget is decided against
    the nodes resurrect has drained now (read from ``scheduler``), as a local snapshot.
    """
    cluster = config.cluster.name
    if client is None:
        _, nodes = await scheduler.drain_census()
        now = datetime.now(UTC)
        snapshot = BudgetState(
            cluster=cluster,
            records=[
                DrainRecord(node=n.name, partitions=n.partitions, workflow_id="", job_id="", at=now)
                for n in held_by_resurrect(nodes)
            ],
        )
        return grant_drains(snapshot, request, now)[1]
    workflow_id = drain_budget_workflow_id(cluster)
    census = await held_now(scheduler)
    if observe:  # ask, reserve nothing (and change nothing, not even owners)
        state = None
        if await runs_on_operator_queue(client, config, workflow_id):
            try:
                state = await budget_state(client, cluster)
            except ResurrectError:
                state = None
        now = datetime.now(UTC)
        return grant_drains(state or BudgetState(cluster=cluster), request, now, census.nodes)[1]
    batch = _batch_of(client, config)
    return await on_operator_queue(
        client, config, workflow_id, lambda: batch.reserve(request, census)
    )


@dataclass
class _ReservationBatch:
    """The reservations of this process's recoveries for one cluster's budget, sent as one
    update while the previous one is in flight: a burst of a thousand recoveries costs the
    budget workflow a few updates, not a thousand (each answered as if asked alone). The
    census of held nodes goes with an update only when it is newer than the one this batch
    last gave the budget (or the budget refuses the update for want of it)."""

    client: Client
    config: ResurrectConfig
    waiting: list[tuple[DrainReservation, asyncio.Future[DrainGrant]]] = field(default_factory=list)
    sender: asyncio.Task[None] | None = None
    census: HeldCensus | None = None  # the newest the waiting reservations were read with
    sent_at: datetime | None = None  # when the census last given to the budget was read

    async def reserve(self, request: DrainReservation, census: HeldCensus) -> DrainGrant:
        answer: asyncio.Future[DrainGrant] = asyncio.get_running_loop().create_future()
        self.waiting.append((request.model_copy(update={"held": []}), answer))
        if self.census is None or census.read_at > self.census.read_at:
            self.census = census
        if self.sender is None or self.sender.done():
            self.sender = asyncio.create_task(self._send_all())
        return await asyncio.shield(answer)

    async def _send_all(self) -> None:
        while self.waiting:
            batch = self.waiting[: _fitting(r for r, _ in self.waiting[:RESERVATIONS_PER_UPDATE])]
            del self.waiting[: len(batch)]
            try:
                grants = await self._send([r for r, _ in batch])
            except Exception as exc:  # every reservation of the batch fails the same way
                for _, answer in batch:
                    if not answer.done():
                        answer.set_exception(exc)
                continue
            for (_, answer), grant in zip(batch, grants, strict=True):
                if not answer.done():
                    answer.set_result(grant)

    async def _send(self, requests: list[DrainReservation]) -> list[DrainGrant]:
        census = self.census
        assert census is not None  # set by every reserve
        given = self.sent_at is not None and self.sent_at >= census.read_at
        try:
            grants = await _send(self.client, self.config, requests, census, with_census=not given)
        except WorkflowUpdateFailedError as exc:
            if not given or not _census_not_kept(exc):
                raise
            # the budget keeps no census this new (it continued as new, or was started
            # again): the same reservations, with the census
            grants = await _send(self.client, self.config, requests, census, with_census=True)
        self.sent_at = census.read_at
        return grants


def _census_not_kept(exc: WorkflowUpdateFailedError) -> bool:
    cause = exc.cause
    return isinstance(cause, ApplicationError) and cause.type == CENSUS_NOT_KEPT


def _fitting(requests: Iterable[DrainReservation]) -> int:
    """How many of ``requests`` (at least one) fit in one update of ``UPDATE_BYTES``."""
    count, size = 0, 0
    for request in requests:
        size += len(request.model_dump_json())
        if count and size > UPDATE_BYTES:
            break
        count += 1
    return max(count, 1)


# One batch per client and cluster (the activities of one worker share its event loop).
_BATCHES: weakref.WeakKeyDictionary[Client, dict[str, _ReservationBatch]] = (
    weakref.WeakKeyDictionary()
)


def _batch_of(client: Client, config: ResurrectConfig) -> _ReservationBatch:
    batches = _BATCHES.setdefault(client, {})
    key = f"{config.cluster.name}/{config.temporal.task_queue}"
    if key not in batches:
        batches[key] = _ReservationBatch(client, config)
    return batches[key]


async def _send(
    client: Client,
    config: ResurrectConfig,
    requests: list[DrainReservation],
    census: HeldCensus,
    *,
    with_census: bool,
) -> list[DrainGrant]:
    """One ``reserve_drains_census`` update (starting the budget workflow if needed), tried
    again while the server is busy with others; ``with_census``: the update carries it."""
    batch = CensusReservations(
        requests=requests,
        census_at=census.read_at,
        held=list(census.nodes) if with_census else None,
    )
    start = _with_start(config)
    for attempt in range(RESERVE_ATTEMPTS):
        try:
            grants: list[DrainGrant] = await client.execute_update_with_start_workflow(
                RESERVE_DRAINS_CENSUS_UPDATE,
                batch,
                start_workflow_operation=start,
                result_type=list[DrainGrant],
            )
            return grants
        except RPCError as exc:
            # Temporal admits a few in-flight updates per workflow (10 by default) and aborts
            # an update when the workflow continues as new: in a burst of recoveries the
            # others try again (a reservation asked twice gets the same answer)
            if exc.status not in RESERVE_AGAIN or attempt + 1 == RESERVE_ATTEMPTS:
                raise
        pause = min(1.0, 0.05 * 2 ** min(attempt, 5))
        await asyncio.sleep(random.uniform(0.02, pause))  # noqa: S311 - jitter, not a secret
        start = _with_start(config)
    raise AssertionError("unreachable")


def _with_start(config: ResurrectConfig) -> WithStartWorkflowOperation[Any, Any]:
    """Start the cluster's budget workflow unless it runs (an operation is used once)."""
    cluster = config.cluster.name
    return WithStartWorkflowOperation(
        DRAIN_BUDGET_WORKFLOW,
        BudgetState(cluster=cluster),
        id=drain_budget_workflow_id(cluster),
        task_queue=budget_task_queue(config),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


async def budget_state(client: Client, cluster: str) -> BudgetState | None:
    """The cluster's budget state, or None when no drain was ever reserved."""
    try:
        return await query_operator_workflow(
            client, drain_budget_workflow_id(cluster), BUDGET_QUERY, BudgetState
        )
    except TimeoutError as exc:
        raise ResurrectError(
            f"the drain budget of {cluster} does not answer (no worker for it?)"
        ) from exc
