"""Which task queue the drain-budget and node-repair workflows run on, and calls to them
made only once they run there (or not at all: a start puts them there).

By default they have task queues and workers of their own: the repair workflows
``<task_queue>-operator``, the drain budget ``<task_queue>-operator-budget`` (every drain step
waits for its update, and a burst starts hundreds of repair workflows whose workflow tasks
would come first on a shared queue). A budget started on the operator queue (by a release
before it had a queue of its own) runs on there, served by the operator worker. One found
running on any other task queue (another deployment's, or this one's before its operator
queue was renamed) is ended, so updates and signals never wait for a worker that will not
come.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
)
from temporalio.service import RPCError, RPCStatusCode

from resurrect.config import ResurrectConfig
from resurrect.contracts.workflow_ids import drain_budget_workflow_id

log = logging.getLogger(__name__)

# A query no worker answers (a workflow of another task queue) would wait for the RPC
# deadline; operator reads give up sooner.
QUERY_TIMEOUT_S = 10.0
QueryResult = TypeVar("QueryResult")
CallResult = TypeVar("CallResult")


def operator_task_queue(config: ResurrectConfig) -> str:
    """The task queue of the node-repair workflows (and the drain budget's, with
    :func:`budget_task_queue`): ``temporal.operator_task_queue``, by default
    ``<task_queue>-operator`` (a worker of their own); set to ``task_queue`` itself, they
    share the recoveries' queue and worker."""
    return config.temporal.operator_task_queue or f"{config.temporal.task_queue}-operator"


def budget_task_queue(config: ResurrectConfig) -> str:
    """The task queue the drain budget is started on: ``<operator task queue>-budget``, with a
    worker of its own; the operator queue itself when that is shared with the recoveries."""
    queue = operator_task_queue(config)
    return queue if queue == config.temporal.task_queue else f"{queue}-budget"


def task_queues_of(config: ResurrectConfig, workflow_id: str) -> tuple[str, ...]:
    """The task queues this deployment's workers run the operator workflow ``workflow_id``
    on, the one it is started on first: the drain budget's own, then the operator queue (a
    budget started there before); the operator queue for a repair workflow."""
    operator = operator_task_queue(config)
    if workflow_id == drain_budget_workflow_id(config.cluster.name):
        return tuple(dict.fromkeys((budget_task_queue(config), operator)))
    return (operator,)


async def claim_for_task_queue(client: Client, workflow_id: str, config: ResurrectConfig) -> None:
    """See that the operator workflow ``workflow_id`` runs on a task queue of this
    deployment's (:func:`task_queues_of`), or does not run (a start puts it there).

    One bound to another task queue is ended, so ours can start: no worker of ours would ever
    run it, and updates and signals to it would wait for ever. Its records are lost (logged):
    run one resurrect deployment (task queue) per cluster."""
    queues = task_queues_of(config, workflow_id)
    target = queues[0]
    handle = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
        if (
            description.status is not WorkflowExecutionStatus.RUNNING
            or description.task_queue in queues
        ):
            return
        log.warning(
            "%s runs on task queue %s, not %s: ending it and starting ours",
            workflow_id,
            description.task_queue,
            target,
        )
        await handle.terminate(reason=f"superseded by the workers of task queue {target}")
    except RPCError as exc:  # there is none, or it ended meanwhile
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise


@dataclass
class _Claims:
    """One process's (client's) memory of the operator workflows known to run on their
    operator task queue (workflow id, task queue), and the claims being asked now."""

    known: set[tuple[str, str]] = field(default_factory=set)
    asking: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict)


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
    key = (workflow_id, task_queues_of(config, workflow_id)[0])
    if key not in claims.known:
        asking = claims.asking.get(key)
        if asking is None:
            asking = asyncio.create_task(claim_for_task_queue(client, workflow_id, config))
            claims.asking[key] = asking

            def done(task: asyncio.Task[None]) -> None:
                if claims.asking.get(key) is task:
                    del claims.asking[key]

            asking.add_done_callback(done)
        await asyncio.shield(asking)
    try:
        result = await call()
    except BaseException:
        claims.known.discard(key)
        raise
    claims.known.add(key)  # it runs there now (a start with USE_EXISTING put it there)
    return result


async def runs_on_operator_queue(client: Client, config: ResurrectConfig, workflow_id: str) -> bool:
    """The workflow runs, on a task queue of this deployment's (:func:`task_queues_of`: a
    query gets an answer)."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return False
        raise
    return (
        description.status is WorkflowExecutionStatus.RUNNING
        and description.task_queue in task_queues_of(config, workflow_id)
    )


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
