"""Which task queue the drain-budget and node-repair workflows run on, and calls to them
made only once they run there (or not at all: a start puts them there).

By default they have a task queue and worker of their own (``<task_queue>-operator``); one
found on the recoveries' queue (the operator queue was named as the task queue, or renamed)
is moved with its records, one on another deployment's queue is ended, so updates and
signals never wait for a worker that will not come.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
)
from temporalio.service import RPCError, RPCStatusCode

from resurrect.config import ResurrectConfig
from resurrect.contracts.workflow_ids import drain_budget_workflow_id
from resurrect.workflows.names import MOVE_TO_TASK_QUEUE_SIGNAL

log = logging.getLogger(__name__)

# A query no worker answers (a workflow of another task queue) would wait for the RPC
# deadline; operator reads give up sooner.
QUERY_TIMEOUT_S = 10.0
QueryResult = TypeVar("QueryResult")
CallResult = TypeVar("CallResult")


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


async def runs_on(client: Client, workflow_id: str, task_queues: Collection[str]) -> bool:
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


async def query_operator_workflow(
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
