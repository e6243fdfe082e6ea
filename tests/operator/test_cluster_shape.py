"""resurrect.operator.budget_client.cluster_shape: what drain budgets are fractions of, read at most
once a minute per scheduler (not once per drain), and once for a burst of callers."""

from __future__ import annotations

import asyncio

import pytest

from resurrect.contracts import NodeInfo
from resurrect.errors import SchedulerUnavailable
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


class SlowScheduler(CountingScheduler):
    """Its node list answers only when the test lets it."""

    def __init__(self, nodes: list[NodeInfo]) -> None:
        super().__init__(nodes)
        self.answer = asyncio.Event()
        self.asked = asyncio.Event()

    async def list_nodes(self) -> list[NodeInfo]:
        self.asked.set()
        await self.answer.wait()
        return await super().list_nodes()


async def test_a_burst_of_callers_with_the_shape_stale_shares_one_read() -> None:
    scheduler = SlowScheduler([NodeInfo(name="n1", state="IDLE", partitions=["gpu"])])
    callers = [asyncio.create_task(cluster_shape(scheduler)) for _ in range(50)]
    await scheduler.asked.wait()
    scheduler.answer.set()
    shapes = await asyncio.gather(*callers)
    assert scheduler.listed == 1
    assert shapes == [ClusterShape(nodes=1, partitions={"gpu": 1})] * 50


async def test_a_caller_that_gives_up_leaves_the_shared_read_to_the_others() -> None:
    scheduler = SlowScheduler([NodeInfo(name="n1", state="IDLE", partitions=["gpu"])])
    impatient = asyncio.create_task(cluster_shape(scheduler))
    await scheduler.asked.wait()
    patient = asyncio.create_task(cluster_shape(scheduler))
    impatient.cancel()
    scheduler.answer.set()
    assert (await patient).nodes == 1 and scheduler.listed == 1
    with pytest.raises(asyncio.CancelledError):
        await impatient


async def test_a_failed_read_is_not_kept_the_next_caller_reads_again() -> None:
    class Failing(CountingScheduler):
        fail = True

        async def list_nodes(self) -> list[NodeInfo]:
            if self.fail:
                self.fail = False
                raise SchedulerUnavailable("slurmctld is down")
            return await super().list_nodes()

    scheduler = Failing([NodeInfo(name="n1", state="IDLE", partitions=["gpu"])])
    with pytest.raises(SchedulerUnavailable):
        await cluster_shape(scheduler)
    assert (await cluster_shape(scheduler)).nodes == 1
