"""How many nodes a cluster has, in all and per partition, read at most once a minute.

The watcher's cheap view (active jobs, unhealthy nodes, nodes by name, the drain census) is
part of every backend: :class:`~resurrect.scheduler.base.Scheduler` and its defaults in
:class:`~resurrect.scheduler.base.SchedulerBase`.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Collection
from dataclasses import dataclass

from resurrect.contracts import NodeInfo
from resurrect.scheduler.base import Scheduler, active_only, census_of

__all__ = [
    "SHAPE_MAX_AGE_S",
    "ClusterShape",
    "active_only",
    "census_of",
    "cluster_shape",
    "shape_of",
]


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
