"""Exclusions do not pile up: on the real Temporal dev server (recovery, budget and repair
workflows, real activities) with an in-memory scheduler."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from support.operator_control import OPT_IN, ConfigFor, result, start, until, workers
from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState
from resurrect.operator.repair_client import node_state
from resurrect.testing import FakeScheduler

pytestmark = pytest.mark.temporal


def fail_node(scheduler: FakeScheduler, node: str, job_id: str) -> JobInfo:
    """``node`` dies (DOWN, NOT_RESPONDING) and with it the job running on it."""
    scheduler.nodes[node] = scheduler.nodes[node].model_copy(
        update={"state": "DOWN", "flags": ["NOT_RESPONDING", *scheduler.nodes[node].flags]}
    )
    job = scheduler.jobs[job_id].model_copy(update={"state": JobState.NODE_FAIL})
    scheduler.jobs[job_id] = job
    return job


def node_back(scheduler: FakeScheduler, node: str) -> None:
    """``node``'s daemon answers again (a drain, if any, stays)."""
    current = scheduler.nodes[node]
    flags = [f for f in current.flags if f != "NOT_RESPONDING"]
    scheduler.nodes[node] = current.model_copy(update={"state": "IDLE", "flags": flags})


def job_on(scheduler: FakeScheduler, job_id: str, nodes: list[str]) -> None:
    scheduler.jobs[job_id] = JobInfo(
        job_id=job_id,
        name="train",
        state=JobState.RUNNING,
        user="alice",
        user_id=os.getuid(),
        nodes=nodes,
        num_nodes=len(nodes),
        comment=OPT_IN,
    )


async def recover(client: Client, config: ResurrectConfig, job: JobInfo) -> Any:
    return await result(client, await start(client, config, job))


async def test_a_node_back_in_service_leaves_the_jobs_exclusion_list(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = operator_config(
        repair={"enabled": True, "cool_down_s": 2},
        isolation={"health_check_argv": ["true"]},
    )
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    job_on(scheduler, "101", ["node1"])
    async with workers(temporal_client, config, scheduler, count=1):
        first = await recover(temporal_client, config, fail_node(scheduler, "node1", "101"))
        assert first.drained_nodes == ["node1"] and first.excluded_nodes == ["node1"]
        node_back(scheduler, "node1")

        async def returned() -> bool:
            state = await node_state(temporal_client, config.cluster.name, "node1")
            return state is not None and state.returns == 1

        await until(returned, "node1 back in service")
        assert not scheduler.nodes["node1"].drained
        running = scheduler.jobs["101"]
        assert running.state is JobState.RUNNING and running.excluded_nodes == ["node1"]
        second = await recover(
            temporal_client, config, fail_node(scheduler, running.nodes[0], "101")
        )
        state = await node_state(temporal_client, config.cluster.name, "node1")
    victim = running.nodes[0]
    assert second.recovered, second.notes
    assert scheduler.jobs["101"].excluded_nodes == [victim]
    assert any("node1 no longer excluded from job 101: back in service" in n for n in second.notes)
    assert state is not None and "101" not in state.exclusions
    assert [e.kind for e in state.events] == [
        "drained",  # and excluded: the drain report says from which job
        "check_passed",
        "returned",
        "included",
    ]


async def test_the_oldest_exclusion_goes_when_the_job_would_not_fit(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = operator_config(
        repair={"enabled": True},
        isolation={"max_drain_nodes": 0, "min_drain_budget": 0},
    )
    scheduler = FakeScheduler.with_nodes(3, cluster_name=config.cluster.name)
    job_on(scheduler, "201", ["node1", "node2"])
    async with workers(temporal_client, config, scheduler, count=1):
        first = await recover(temporal_client, config, fail_node(scheduler, "node1", "201"))
        assert first.recovered and first.drained_nodes == []
        assert scheduler.jobs["201"].nodes == ["node2", "node3"]
        node_back(scheduler, "node1")
        await asyncio.sleep(0.1)
        second = await recover(temporal_client, config, fail_node(scheduler, "node2", "201"))
    assert second.recovered, second.notes
    job = scheduler.jobs["201"]
    assert job.excluded_nodes == ["node2"] and sorted(job.nodes) == ["node1", "node3"]
    assert any(
        "node1 no longer excluded from job 201" in n and "fewer than its 2 nodes" in n
        for n in second.notes
    )
