"""The watcher's view of a scheduler: only what can matter, at a cost independent of the queue.

A backend that can read running/just-ended jobs and unhealthy nodes cheaply (the Slurm CLI
backend, through compact filtered queries) implements :class:`ActiveView`; for any other
backend these helpers fall back to the full reads and filter here.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from resurrect.contracts import JobInfo, JobState, NodeInfo
from resurrect.scheduler.base import Scheduler


@runtime_checkable
class ActiveView(Protocol):
    async def list_active_jobs(self, also: Collection[str] = ()) -> list[JobInfo]:
        """Running, suspended and recently failed jobs, and the jobs ``also`` names."""
        ...

    async def list_unhealthy_nodes(self) -> list[NodeInfo]:
        """Nodes that are down, failed, not responding, unknown or future."""
        ...

    async def list_nodes_named(self, names: Collection[str]) -> list[NodeInfo]:
        """The nodes of ``names`` that exist."""
        ...

    async def drain_census(self) -> tuple[int, list[NodeInfo]]:
        """How many nodes the cluster has, and the drained (or draining) ones."""
        ...


# Pending and normally ended jobs never make an interruption by themselves.
_IDLE_STATES = frozenset({JobState.PENDING, JobState.COMPLETED, JobState.CANCELLED})


async def active_jobs(scheduler: Scheduler, also: Collection[str] = ()) -> list[JobInfo]:
    """Jobs a watcher must see: :meth:`ActiveView.list_active_jobs`, or the full list
    without pending and normally ended jobs (except those ``also`` names)."""
    if isinstance(scheduler, ActiveView):
        return await scheduler.list_active_jobs(also)
    return active_only(await scheduler.list_jobs(), also)


def active_only(jobs: Iterable[JobInfo], also: Collection[str] = ()) -> list[JobInfo]:
    """``jobs`` without pending and normally ended ones (except those ``also`` names)."""
    wanted = set(also)
    return [job for job in jobs if job.state not in _IDLE_STATES or job.job_id in wanted]


async def unhealthy_nodes(scheduler: Scheduler) -> list[NodeInfo]:
    """Nodes that are unavailable: :meth:`ActiveView.list_unhealthy_nodes`, or filtered."""
    if isinstance(scheduler, ActiveView):
        return await scheduler.list_unhealthy_nodes()
    return [node for node in await scheduler.list_nodes() if node.unavailable]


async def nodes_named(scheduler: Scheduler, names: Collection[str]) -> list[NodeInfo]:
    """The nodes of ``names`` that exist, read by name where the backend can."""
    wanted = set(names)
    if not wanted:
        return []
    if isinstance(scheduler, ActiveView):
        return await scheduler.list_nodes_named(sorted(wanted))
    return [node for node in await scheduler.list_nodes() if node.name in wanted]


async def drain_census(scheduler: Scheduler) -> tuple[int, list[NodeInfo]]:
    """The cluster's node count and its drained nodes (what a blast-radius budget needs)."""
    if isinstance(scheduler, ActiveView):
        return await scheduler.drain_census()
    nodes = await scheduler.list_nodes()
    return census_of(nodes)


def census_of(nodes: Collection[NodeInfo]) -> tuple[int, list[NodeInfo]]:
    """The node count of ``nodes`` and the drained (or draining) ones among them."""
    return len(nodes), [node for node in nodes if node.drained]


@dataclass(frozen=True)
class ClusterShape:
    """How many nodes the cluster has, in all and in each partition (what drain budgets are
    fractions of)."""

    nodes: int
    partitions: dict[str, int]


# A cluster's shape changes when nodes are added or partitions redrawn, not per recovery: one
# full read per process per minute instead of one per drain (every node of a 10,000-node
# cluster for each recovery of a burst).
SHAPE_MAX_AGE_S = 60.0
_SHAPES: weakref.WeakKeyDictionary[Scheduler, tuple[float, ClusterShape]] = (
    weakref.WeakKeyDictionary()
)


async def cluster_shape(scheduler: Scheduler) -> ClusterShape:
    """The cluster's node counts, read at most once a minute (``SHAPE_MAX_AGE_S``)."""
    cached = _SHAPES.get(scheduler)
    if cached is not None and time.monotonic() - cached[0] < SHAPE_MAX_AGE_S:
        return cached[1]
    shape = shape_of(await scheduler.list_nodes())
    _SHAPES[scheduler] = (time.monotonic(), shape)
    return shape


def shape_of(nodes: Collection[NodeInfo]) -> ClusterShape:
    """The shape of a cluster of ``nodes``."""
    partitions: dict[str, int] = {}
    for node in nodes:
        for partition in node.partitions:
            partitions[partition] = partitions.get(partition, 0) + 1
    return ClusterShape(nodes=len(nodes), partitions=partitions)
