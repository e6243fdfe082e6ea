"""One release serves a task queue at a time.

A workflow in flight is replayed by whichever worker picks up its next task. Two releases
polling one task queue would each take some of the tasks: a recovery that a newer release
started under a patch could be replayed by the older code (refused at best), and which
release decided what could no longer be told. So a worker names its release in its
identity (:func:`worker_identity`, ``resurrect-0.2.1@host:pid``) and does not start while a
worker of another release polls its task queues (:func:`refuse_other_releases`); workers
before 0.2.1 name none and count as another release. docs/upgrading.md is the procedure.

Temporal lists each poller with the time its last poll began. A live worker that has no
task waits in a long poll (a minute by default) and polls again, so a poller seen is watched:
polling again, it is alive (refused); its last poll ``window_s`` old, it has stopped.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Sequence

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from resurrect import __version__
from resurrect.errors import OtherReleaseServing

IDENTITY_PREFIX = "resurrect-"
_TASK_TYPES = {
    "workflow": TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    "activity": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
}


def worker_identity(release: str = __version__) -> str:
    """The identity this process' workers poll with: its release, host and process."""
    return f"{IDENTITY_PREFIX}{release}@{socket.gethostname()}:{os.getpid()}"


def release_of(identity: str) -> str | None:
    """The release a poller's identity names; None for a worker that names none (resurrect
    before 0.2.1, or not resurrect)."""
    if not identity.startswith(IDENTITY_PREFIX) or "@" not in identity:
        return None
    return identity[len(IDENTITY_PREFIX) : identity.index("@")] or None


async def _pollers_of_other_releases(
    client: Client, task_queues: Sequence[str], release: str, now: float, window_s: float
) -> dict[tuple[str, str, str], float]:
    """(task queue, task type, identity) -> when its last poll began, for the pollers of
    another release seen within ``window_s``."""
    found: dict[tuple[str, str, str], float] = {}
    for queue in task_queues:
        for kind, task_type in _TASK_TYPES.items():
            answer = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=queue),
                    task_queue_type=task_type,
                )
            )
            for poller in answer.pollers:
                if release_of(poller.identity) == release:
                    continue
                polled = poller.last_access_time.ToMicroseconds() / 1e6
                if now - polled < window_s:
                    found[(queue, kind, poller.identity)] = polled
    return found


async def refuse_other_releases(
    client: Client,
    task_queues: Sequence[str],
    window_s: float,
    *,
    release: str = __version__,
    interval_s: float = 1.0,
    clock: Callable[[], float] = time.time,
) -> None:
    """Return once no worker of another release polls ``task_queues``; raise
    OtherReleaseServing when one does. A poller of another release whose last poll began
    within ``window_s`` is watched (every ``interval_s``) until it polls again or its last
    poll is ``window_s`` old. ``window_s`` 0: no check."""
    if window_s <= 0:
        return
    first_seen: dict[tuple[str, str, str], float] = {}
    while True:
        others = await _pollers_of_other_releases(client, task_queues, release, clock(), window_s)
        if not others:
            return
        for key, polled in others.items():
            if polled > first_seen.setdefault(key, polled):
                queue, kind, identity = key
                other = release_of(identity) or "a release before 0.2.1"
                raise OtherReleaseServing(
                    f"a worker of {other} ({identity}) polls {kind} tasks of task queue"
                    f" {queue!r}: this worker (resurrect {release}) does not start beside it."
                    " Two releases must never serve one task queue: stop every worker of the"
                    " other release first, then start this one (docs/upgrading.md)"
                )
        await asyncio.sleep(interval_s)
