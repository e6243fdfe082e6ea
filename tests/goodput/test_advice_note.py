"""The advice line of a recovery's notes: the cluster's rates computed once per refresh and
shared, and a note (never a failure) when they cannot be had."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState
from resurrect.errors import SchedulerUnavailable
from resurrect.goodput.advice_note import PREFIX, RatesCache, advice_note, newest_recovery
from resurrect.goodput.model import RecoveryCost
from resurrect.goodput.rates import ClusterRates, cluster_rates
from resurrect.testing import FakeScheduler


class Recoveries:
    """A Temporal client whose visibility lists nothing (or stalls, or fails)."""

    data_converter = pydantic_data_converter

    def __init__(self, behaviour: str = "empty") -> None:
        self.behaviour = behaviour
        self.lists = 0

    def list_workflows(self, query: str, limit: int) -> AsyncIterator[Any]:
        self.lists += 1

        async def listing() -> AsyncIterator[Any]:
            if self.behaviour == "stall":
                await asyncio.sleep(3600)
            if self.behaviour == "fail":
                raise SchedulerUnavailable("visibility store down")
            for item in ():
                yield item

        return listing()


def config() -> ResurrectConfig:
    return ResurrectConfig.model_validate({"cluster": {"name": "c"}})


JOB = JobInfo(job_id="5", state=JobState.RUNNING, nodes=["node1"], num_nodes=1)


async def test_the_cluster_rates_are_computed_once_per_refresh_and_shared() -> None:
    clock = [0.0]
    cache = RatesCache(refresh_s=600, clock=lambda: clock[0])
    computed = 0

    async def compute() -> ClusterRates:
        nonlocal computed
        computed += 1
        await asyncio.sleep(0)
        return cluster_rates([], min_incidents=computed)

    first = await asyncio.gather(*(cache.rates("c", compute) for _ in range(20)))
    assert computed == 1 and {r.min_incidents for r in first} == {1}
    # stale: the kept rates at once, the next computation in the background
    clock[0] = 601
    assert (await cache.rates("c", compute)).min_incidents == 1
    await asyncio.sleep(0.01)
    assert computed == 2
    assert (await cache.rates("c", compute)).min_incidents == 2


async def no_rates() -> ClusterRates:
    return cluster_rates([])


async def test_recoveries_in_a_burst_never_make_the_rates_computed_again() -> None:
    cache = RatesCache(refresh_s=600)
    await cache.rates("c", no_rates)
    for _ in range(200):  # each a recovery that started after the rates were computed
        await cache.rates("c", no_rates)
    assert cache.computations == 1


async def test_the_publisher_waits_for_rates_covering_the_newest_recovery_it_saw() -> None:
    cache = RatesCache(refresh_s=600)
    await cache.rates("c", no_rates)
    await cache.rates("c", no_rates, covering=datetime.now(UTC) - timedelta(minutes=1))
    assert cache.computations == 1
    await cache.rates("c", no_rates, covering=datetime.now(UTC) + timedelta(seconds=1))
    assert cache.computations == 2


async def test_with_no_recoveries_the_note_says_there_are_too_few_incidents() -> None:
    client = Recoveries()
    scheduler = FakeScheduler.with_nodes(2, cluster_name="c")
    scheduler.jobs["5"] = JOB
    note = await advice_note(client, scheduler, config(), JOB, cache=RatesCache())  # type: ignore[arg-type]
    assert note.startswith(PREFIX + "no advice: too few incidents to advise (0 < 5")


async def test_a_failing_or_stalled_source_gives_a_note_not_a_failure() -> None:
    scheduler = FakeScheduler.with_nodes(2, cluster_name="c")
    failed = await advice_note(
        Recoveries("fail"),  # type: ignore[arg-type]
        scheduler,
        config(),
        JOB,
        cache=RatesCache(),
    )
    assert failed.startswith(PREFIX + "unavailable (SchedulerUnavailable: visibility store down")
    started = datetime.now(UTC)
    cache = RatesCache()
    stalled = await advice_note(
        Recoveries("stall"),  # type: ignore[arg-type]
        scheduler,
        config(),
        JOB,
        cache=cache,
        deadline_s=0.2,
    )
    assert stalled == PREFIX + "not computed within 0.2 s"
    assert (datetime.now(UTC) - started).total_seconds() < 5
    cache.cancel()


async def test_a_caller_that_stops_waiting_leaves_the_computation_to_the_next() -> None:
    cache = RatesCache()
    release = asyncio.Event()
    computed = 0

    async def compute() -> ClusterRates:
        nonlocal computed
        computed += 1
        await release.wait()
        return cluster_rates([])

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await cache.rates("c", compute)
    release.set()
    assert (await cache.rates("c", compute)).rate.incidents == 0
    assert computed == 1


def test_rates_are_stale_once_a_recovery_started_or_ended_after_them() -> None:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    running = RecoveryCost(
        workflow_id="w", attempt=0, fault_class="node.lost", outcome=None, started_at=t0
    )
    closed = running.model_copy(update={"closed_at": t0 + timedelta(seconds=9)})
    assert newest_recovery([running]) == t0
    assert newest_recovery([running, closed]) == t0 + timedelta(seconds=9)
    assert newest_recovery([]) is None
