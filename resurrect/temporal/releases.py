"""One release serves a task queue at a time.

A workflow in flight is replayed by whichever worker picks up its next task. Two releases
polling one task queue would each take some of the tasks: a recovery that a newer release
started under a patch could be replayed by the older code (refused at best), and which
release decided what could no longer be told. So a worker names its release in its
identity (:func:`worker_identity`, ``resurrect-0.2.1@host:pid``) and does not start while a
worker of another release polls its task queues (:func:`refuse_other_releases`); workers
before 0.2.1 name none and count as another release. A release before 0.2.1 has no such
check, so a running worker keeps watching (:func:`watch_other_releases`): one that started
beside it later is logged as an error and counted on the
``resurrect_other_release_pollers`` gauge. docs/upgrading.md is the procedure.

Temporal lists each poller with the time its last poll began. A live worker that has no
task waits in a long poll (a minute by default) and polls again, so a poller seen is watched:
polling again, it is alive (refused); its last poll ``window_s`` old, it has stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
from resurrect.telemetry.metrics import OTHER_RELEASE_POLLERS

log = logging.getLogger(__name__)

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
        for key in _polled_again(others, first_seen):
            queue, kind, identity = key
            raise OtherReleaseServing(
                f"a worker of {_named(identity)} ({identity}) polls {kind} tasks of task queue"
                f" {queue!r}: this worker (resurrect {release}) does not start beside it."
                " Two releases must never serve one task queue: stop every worker of the"
                " other release first, then start this one (docs/upgrading.md)"
            )
        await asyncio.sleep(interval_s)


async def watch_other_releases(
    client: Client,
    task_queues: Sequence[str],
    window_s: float,
    stop: asyncio.Event,
    *,
    release: str = __version__,
    interval_s: float = 30.0,
    clock: Callable[[], float] = time.time,
) -> None:
    """Until ``stop``: every ``interval_s``, look for workers of another release that poll
    ``task_queues`` (a release before 0.2.1 starts without looking). One seen polling again
    is alive: logged as an error once and counted on ``resurrect_other_release_pollers``
    (0 again once none is alive). Two calls per task queue and type per interval, whatever
    the number of recoveries. ``window_s`` 0: no watch."""
    if window_s <= 0:
        return
    first_seen: dict[tuple[str, str, str], float] = {}
    reported: set[str] = set()
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
            return
        try:
            others = await _pollers_of_other_releases(
                client, task_queues, release, clock(), window_s
            )
        except Exception as exc:  # the server away: the next interval looks again
            log.debug("could not list the pollers of %s: %s", ", ".join(task_queues), exc)
            continue
        first_seen = {key: first_seen.get(key, polled) for key, polled in others.items()}
        alive = {identity for _, _, identity in _polled_again(others, first_seen)}
        OTHER_RELEASE_POLLERS.set(len(alive))
        for identity in sorted(alive - reported):
            log.error(
                "a worker of %s (%s) polls the task queues this worker (resurrect %s) serves:"
                " two releases must never serve one task queue; stop one of them"
                " (docs/upgrading.md)",
                _named(identity), identity, release,
            )  # fmt: skip
        reported = alive | (reported & {identity for _, _, identity in others})


def _polled_again(
    others: dict[tuple[str, str, str], float], first_seen: dict[tuple[str, str, str], float]
) -> list[tuple[str, str, str]]:
    """The pollers in ``others`` whose last poll began after the one first seen (recorded
    in ``first_seen`` on the way): alive."""
    return [key for key, polled in others.items() if polled > first_seen.setdefault(key, polled)]


def _named(identity: str) -> str:
    return release_of(identity) or "a release before 0.2.1"
