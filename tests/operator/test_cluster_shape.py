"""resurrect.operator.budget_client.cluster_shape: what drain budgets are fractions of, read at most
once a minute per scheduler (not once per drain)."""

from __future__ import annotations

import pytest

from resurrect.contracts import NodeInfo
from resurrect.operator import budget_client
from resurrect.operator.budget_client import ClusterShape, cluster_shape
from resurrect.testing import FakeScheduler


class CountingScheduler(FakeScheduler):
    listed = 0

    async def list_nodes(self) -> list[NodeInfo]:
        self.listed += 1
        return await super().list_nodes()


def partitioned(*partitions: list[str]) -> CountingScheduler:
    return CountingScheduler(
        [NodeInfo(name=f"n{i}", state="IDLE", partitions=p) for i, p in enumerate(partitions)]
    )


async def test_the_shape_counts_nodes_in_all_and_per_partition() -> None:
    scheduler = partitioned(["gpu"], ["gpu", "debug"], ["cpu"], [])
    assert await cluster_shape(scheduler) == ClusterShape(
        nodes=4, partitions={"gpu": 2, "debug": 1, "cpu": 1}
    )


async def test_the_shape_is_read_again_only_after_a_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(budget_client.time, "monotonic", lambda: now[0])
    scheduler = partitioned(["gpu"], ["gpu"])
    await cluster_shape(scheduler)
    scheduler.nodes["n2"] = NodeInfo(name="n2", state="IDLE", partitions=["gpu"])
    now[0] += budget_client.SHAPE_MAX_AGE_S - 1
    assert (await cluster_shape(scheduler)).nodes == 2 and scheduler.listed == 1
    now[0] += 2
    assert (await cluster_shape(scheduler)).nodes == 3 and scheduler.listed == 2
    other = partitioned(["cpu"])  # each scheduler (cluster) has its own
    assert (await cluster_shape(other)).partitions == {"cpu": 1}
