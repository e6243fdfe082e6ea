"""Activities of operator control, and the calls the drain step makes to the budget and
repair workflows.

``reserve_drains`` asks the cluster's DrainBudgetWorkflow (update-with-start: the first
drain of a cluster starts it). ``report_drained`` starts or signals a node's repair
workflow. :class:`OperatorActivities` holds what the budget and repair workflows call:
the approval settings, notifications, the node health check and the resume.
"""

from __future__ import annotations

import asyncio
import logging
import random
import weakref
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from resurrect.config import ResurrectConfig
from resurrect.contracts import NodeInfo
from resurrect.errors import NodeNotFound, ResurrectError, SchedulerRefused
from resurrect.operator.budget import grant_drains, limits_for
from resurrect.operator.health_check import run_health_check
from resurrect.operator.models import (
    BudgetState,
    BudgetTripNotice,
    DrainCandidate,
    DrainGrant,
    DrainRecord,
    DrainReservation,
    NodeCheck,
    NodeDrainReport,
    NodeFlag,
    NodeRepairState,
    RepairTimings,
)
from resurrect.records import carry_over
from resurrect.scheduler.base import DRAIN_REASON_PREFIX, Scheduler
from resurrect.scheduler.view import ClusterShape, drain_census
from resurrect.temporal.failures import failure_of
from resurrect.workflows.names import (
    BUDGET_QUERY,
    DRAIN_BUDGET_WORKFLOW,
    MOVE_TO_TASK_QUEUE_SIGNAL,
    NODE_DRAINED_SIGNAL,
    NODE_REPAIR_WORKFLOW,
    NODE_STATE_QUERY,
    RESERVE_DRAINS_UPDATE,
    OperatorActivity,
    drain_budget_workflow_id,
    node_repair_workflow_id,
)

log = logging.getLogger(__name__)

# Reservations refused because too many updates are in flight are tried again this often.
RESERVE_ATTEMPTS = 200
RESERVE_AGAIN = frozenset(
    {RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.ABORTED, RPCStatusCode.UNAVAILABLE}
)
# At most this many reservations in one ``reserve_drains`` update.
RESERVATIONS_PER_UPDATE = 200
# A query no worker answers (a workflow of another task queue) would wait for the RPC
# deadline; operator reads give up sooner.
QUERY_TIMEOUT_S = 10.0
QueryResult = TypeVar("QueryResult")
CallResult = TypeVar("CallResult")


# ---------------------------------------------------------------------------- ownership
def operator_task_queue(config: ResurrectConfig) -> str:
    """The task queue of the drain-budget and node-repair workflows:
    ``temporal.operator_task_queue``, by default ``<task_queue>-operator`` (a worker of their
    own); set to ``task_queue`` itself, they share the recoveries' queue and worker."""
    return config.temporal.operator_task_queue or f"{config.temporal.task_queue}-operator"


def our_task_queues(config: ResurrectConfig) -> frozenset[str]:
    """The task queues on which this deployment's workers serve the budget and repair
    workflows: their own, and the recoveries' (the main worker runs both workflow types,
    so those the former default started there are served until they have moved)."""
    return frozenset({config.temporal.task_queue, operator_task_queue(config)})


async def claim_for_task_queue(
    client: Client, workflow_id: str, config: ResurrectConfig, *, end_foreign: bool = True
) -> bool:
    """See that the operator workflow ``workflow_id`` runs on this deployment's operator task
    queue (or does not run: a start puts it there); True when it does.

    One running on the recoveries' task queue (started under the former default, or while
    the operator queue was named as the task queue) is asked to move (``move_to_task_queue``:
    it continues as new there with its records; a repair under way finishes first); False
    then: until it has moved, the main worker still serves it. One bound to any other task queue is
    ended, so ours can start: no worker of ours would ever run it (another deployment or
    test started it), and updates and signals to it would wait for ever. Its records are
    lost (logged): run one resurrect deployment (task queue) per cluster. Without
    ``end_foreign`` such a one is left as it is (False)."""
    target = operator_task_queue(config)
    handle = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return True
        raise
    if description.status is not WorkflowExecutionStatus.RUNNING:
        return True
    if description.task_queue == target:
        return True
    try:
        if description.task_queue in our_task_queues(config):
            log.info(
                "%s runs on the recoveries' task queue %s: moving it to %s",
                workflow_id,
                description.task_queue,
                target,
            )
            await handle.signal(MOVE_TO_TASK_QUEUE_SIGNAL, target)
            return False
        if not end_foreign:
            return False
        log.warning(
            "%s runs on task queue %s, not %s: ending it and starting ours",
            workflow_id,
            description.task_queue,
            target,
        )
        await handle.terminate(reason=f"superseded by the workers of task queue {target}")
    except RPCError as exc:  # it ended meanwhile
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise
    return True


@dataclass
class _Claims:
    """One process's (client's) memory of the operator workflows known to run on their
    operator task queue (workflow id, task queue), and the claims being asked now."""

    known: set[tuple[str, str]] = field(default_factory=set)
    asking: dict[tuple[str, str], asyncio.Task[bool]] = field(default_factory=dict)


_CLAIMS: weakref.WeakKeyDictionary[Client, _Claims] = weakref.WeakKeyDictionary()


async def on_operator_queue(
    client: Client,
    config: ResurrectConfig,
    workflow_id: str,
    call: Callable[[], Awaitable[CallResult]],
) -> CallResult:
    """``call`` (an update or signal-with-start of the operator workflow ``workflow_id``)
    once the workflow is claimed for the operator task queue (:func:`claim_for_task_queue`).

    A process describes each workflow once, not on every call (concurrent callers share one
    describe): a drain reservation and a repair report per recovery would otherwise cost a
    burst of a thousand recoveries thousands of describes. The memory of a workflow is
    forgotten when a call to it fails, so one ended or restarted meanwhile is checked again.
    """
    claims = _CLAIMS.setdefault(client, _Claims())
    key = (workflow_id, operator_task_queue(config))
    settled = key in claims.known
    if not settled:
        asking = claims.asking.get(key)
        if asking is None:
            asking = asyncio.create_task(claim_for_task_queue(client, workflow_id, config))
            claims.asking[key] = asking

            def done(task: asyncio.Task[bool]) -> None:
                if claims.asking.get(key) is task:
                    del claims.asking[key]

            asking.add_done_callback(done)
        settled = await asyncio.shield(asking)
    try:
        result = await call()
    except BaseException:
        claims.known.discard(key)
        raise
    if settled:  # it runs there now (a start with USE_EXISTING put it there if it did not)
        claims.known.add(key)
    return result


async def _ours(client: Client, workflow_id: str, task_queues: Collection[str]) -> bool:
    """The workflow runs, on one of ``task_queues`` (so a query gets an answer)."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return False
        raise
    return (
        description.status is WorkflowExecutionStatus.RUNNING
        and description.task_queue in task_queues
    )


async def hand_over_at_start(client: Client, config: ResurrectConfig) -> None:
    """At a worker's start (mode ``act``), claim the cluster's budget workflow for the
    operator task queue (:func:`claim_for_task_queue`): the first burst after an upgrade from
    the former default then reserves its drains from a budget on its own queue, not from one
    waiting on the recoveries' queue for a workflow-task slot the draining recoveries hold.
    Repair workflows move at their next report (a signal, which waits for no slot). One on
    another deployment's task queue is left alone until this one drains."""
    if config.mode != "act" or operator_task_queue(config) == config.temporal.task_queue:
        return  # observe mode changes nothing; one shared queue: nothing to move
    workflow_id = drain_budget_workflow_id(config.cluster.name)
    try:
        await claim_for_task_queue(client, workflow_id, config, end_foreign=False)
    except RPCError as exc:  # checked again at the first drain
        log.warning("could not check which task queue %s runs on: %s", workflow_id, exc)


# ---------------------------------------------------------------------------- budget
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
    dry_run: bool,
) -> DrainGrant:
    """Ask the cluster's budget workflow; in observe mode, ask without reserving.

    Without a Temporal client (a step run in a unit test) the budget is decided against
    the nodes resurrect has drained now (read from ``scheduler``), as a local snapshot.
    """
    cluster = config.cluster.name
    if client is None:
        _, nodes = await drain_census(scheduler)
        now = datetime.now(UTC)
        snapshot = BudgetState(
            cluster=cluster,
            records=[
                DrainRecord(node=n.name, partitions=n.partitions, workflow_id="", job_id="", at=now)
                for n in nodes
                if n.drained and n.reason.startswith(DRAIN_REASON_PREFIX)
            ],
        )
        return grant_drains(snapshot, request, now)[1]
    workflow_id = drain_budget_workflow_id(cluster)
    if dry_run:  # observe mode: ask, reserve nothing (and change nothing, not even owners)
        state = None
        if await _ours(client, workflow_id, our_task_queues(config)):
            try:
                state = await budget_state(client, cluster)
            except ResurrectError:
                state = None
        return grant_drains(state or BudgetState(cluster=cluster), request, datetime.now(UTC))[1]
    batch = _batch_of(client, config)
    return await on_operator_queue(client, config, workflow_id, lambda: batch.reserve(request))


@dataclass
class _ReservationBatch:
    """The reservations of this process's recoveries for one cluster's budget, sent as one
    update while the previous one is in flight: a burst of a thousand recoveries costs the
    budget workflow a few updates, not a thousand (each answered as if asked alone)."""

    client: Client
    config: ResurrectConfig
    waiting: list[tuple[DrainReservation, asyncio.Future[DrainGrant]]] = field(default_factory=list)
    sender: asyncio.Task[None] | None = None

    async def reserve(self, request: DrainReservation) -> DrainGrant:
        answer: asyncio.Future[DrainGrant] = asyncio.get_running_loop().create_future()
        self.waiting.append((request, answer))
        if self.sender is None or self.sender.done():
            self.sender = asyncio.create_task(self._send_all())
        return await asyncio.shield(answer)

    async def _send_all(self) -> None:
        while self.waiting:
            batch = self.waiting[:RESERVATIONS_PER_UPDATE]
            del self.waiting[: len(batch)]
            try:
                grants = await _send(self.client, self.config, [r for r, _ in batch])
            except Exception as exc:  # every reservation of the batch fails the same way
                for _, answer in batch:
                    if not answer.done():
                        answer.set_exception(exc)
                continue
            for (_, answer), grant in zip(batch, grants, strict=True):
                if not answer.done():
                    answer.set_result(grant)


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
    client: Client, config: ResurrectConfig, requests: list[DrainReservation]
) -> list[DrainGrant]:
    """One ``reserve_drains`` update (starting the budget workflow if needed), tried again
    while the server is busy with others."""
    start = _with_start(config)
    for attempt in range(RESERVE_ATTEMPTS):
        try:
            grants: list[DrainGrant] = await client.execute_update_with_start_workflow(
                RESERVE_DRAINS_UPDATE,
                requests,
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
        task_queue=operator_task_queue(config),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


async def _query(
    client: Client, workflow_id: str, query: str, result_type: type[QueryResult]
) -> QueryResult | None:
    """The workflow's answer to ``query``, or None when there is no such workflow.

    Raises TimeoutError when no worker answers within ``QUERY_TIMEOUT_S``."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        return await asyncio.wait_for(handle.query(query, result_type=result_type), QUERY_TIMEOUT_S)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return None
        raise


async def budget_state(client: Client, cluster: str) -> BudgetState | None:
    """The cluster's budget state, or None when no drain was ever reserved."""
    try:
        return await _query(client, drain_budget_workflow_id(cluster), BUDGET_QUERY, BudgetState)
    except TimeoutError as exc:
        raise ResurrectError(
            f"the drain budget of {cluster} does not answer (no worker for it?)"
        ) from exc


# ---------------------------------------------------------------------------- repair
def repair_timings(config: ResurrectConfig) -> RepairTimings:
    return carry_over(config.repair, RepairTimings)


async def report_to_repair(
    client: Client | None, config: ResurrectConfig, node: str, report: NodeDrainReport
) -> None:
    """Start (or signal) ``node``'s repair workflow: resurrect drained or excluded it."""
    if client is None or not config.repair.enabled:
        return
    cluster = config.cluster.name
    workflow_id = node_repair_workflow_id(cluster, node)

    async def signal_with_start() -> None:
        await client.start_workflow(
            NODE_REPAIR_WORKFLOW,
            NodeRepairState(cluster=cluster, node=node, timings=repair_timings(config)),
            id=workflow_id,
            task_queue=operator_task_queue(config),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=NODE_DRAINED_SIGNAL,
            start_signal_args=[report],
        )

    await on_operator_queue(client, config, workflow_id, signal_with_start)


async def node_state(
    client: Client, cluster: str, node: str, task_queues: Collection[str] | None = None
) -> NodeRepairState | None:
    """A node's repair state (history), or None when resurrect never drained it (or, with
    ``task_queues`` (:func:`our_task_queues`), when its repair workflow runs on none)."""
    workflow_id = node_repair_workflow_id(cluster, node)
    if task_queues is not None and not await _ours(client, workflow_id, task_queues):
        return None
    try:
        return await _query(client, workflow_id, NODE_STATE_QUERY, NodeRepairState)
    except (WorkflowQueryFailedError, TimeoutError):
        return None  # no worker serves it (another task queue): as if unknown


async def exclusion_records(
    client: Client | None, config: ResurrectConfig, job_id: str, nodes: Sequence[str]
) -> tuple[dict[str, datetime], dict[str, datetime]]:
    """For ``nodes`` (a job's exclusion list): when resurrect excluded each from ``job_id``,
    and when each last returned to service (from the nodes' repair workflows)."""
    ours: dict[str, datetime] = {}
    returned: dict[str, datetime] = {}
    if client is None or not nodes:
        return ours, returned
    cluster, queues = config.cluster.name, our_task_queues(config)
    states = await asyncio.gather(*[node_state(client, cluster, n, queues) for n in nodes])
    for node, state in zip(nodes, states, strict=True):
        if state is None:
            continue
        if job_id in state.exclusions:
            ours[node] = state.exclusions[job_id]
        if state.returned_at is not None and state.status == "in_service":
            returned[node] = state.returned_at
    return ours, returned


# ---------------------------------------------------------------------------- activities
class OperatorActivities:
    """What the budget and repair workflows (and the recovery's approval gate) call."""

    def __init__(self, scheduler: Scheduler, config: ResurrectConfig) -> None:
        self.scheduler = scheduler
        self.config = config

    def all(self) -> list[Callable[..., Any]]:
        return [self.notify, self.check_node, self.resume_node, self.flag_node]

    def _notify(self, record: dict[str, object], message: str, level: int) -> None:
        from resurrect.activities.steps import append_notification

        log.log(level, "%s", message)
        append_notification(self.config, {**record, "message": message})

    @activity.defn(name=OperatorActivity.NOTIFY)
    async def notify(self, notice: BudgetTripNotice) -> None:
        """The drain budget tripped: tell operators (once per trip)."""
        message = (
            f"drain budget of cluster {notice.cluster} tripped (trip {notice.trip}):"
            f" not draining {', '.join(notice.denied)} for job {notice.job_id};"
            f" {'; '.join(notice.reasons)}. See `resurrect budget`."
        )
        record: dict[str, object] = {
            "time": notice.at.isoformat(),
            "severity": "critical",
            "kind": "drain_budget_tripped",
            "cluster": notice.cluster,
            "workflow_id": notice.workflow_id,
            "job_id": notice.job_id,
        }
        await asyncio.to_thread(self._notify, record, message, logging.CRITICAL)

    @activity.defn(name=OperatorActivity.CHECK_NODE)
    async def check_node(self, node: str) -> NodeCheck:
        """Is ``node`` still drained by resurrect, and does its health check pass?"""
        try:
            info = await self.scheduler.get_node(node)
        except NodeNotFound as exc:
            raise failure_of(exc) from exc
        ours = info.drained and info.reason.startswith(DRAIN_REASON_PREFIX)
        check = NodeCheck(
            node=node, drained_by_resurrect=ours, drained=info.drained, reason=info.reason
        )
        if not ours:
            return check
        argv = self.config.isolation.health_check_argv
        if not argv:
            return check.model_copy(
                update={"detail": "no health check configured (isolation.health_check_argv)"}
            )
        verdict = await run_health_check(argv, node, self.config.repair.check_timeout_s)
        return check.model_copy(update={"healthy": verdict.healthy, "detail": verdict.detail})

    @activity.defn(name=OperatorActivity.RESUME_NODE)
    async def resume_node(self, node: str) -> str:
        """Return ``node`` to service (refused unless resurrect drained it)."""
        try:
            mutation = await self.scheduler.resume_node(node)
        except (SchedulerRefused, NodeNotFound) as exc:
            raise failure_of(exc) from exc
        return mutation.detail if mutation.changed else f"not resumed: {mutation.detail}"

    @activity.defn(name=OperatorActivity.FLAG_NODE)
    async def flag_node(self, flag: NodeFlag) -> None:
        """A node for a hardware ticket: a critical notification with its recent history."""
        message = f"node {flag.node} of {flag.cluster} flagged for a hardware ticket: {flag.why}"
        record: dict[str, object] = {
            "time": datetime.now(UTC).isoformat(),
            "severity": "critical",
            "kind": "node_flagged",
            "cluster": flag.cluster,
            "node": flag.node,
            "history": [e.model_dump(mode="json") for e in flag.events],
        }
        await asyncio.to_thread(self._notify, record, message, logging.CRITICAL)
