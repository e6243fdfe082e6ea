"""Lemon nodes on the real Temporal dev server: recoveries of several jobs on one node make
it a lemon (its repair workflow's record), and the job's lemon policy acts (recovery, budget
and repair workflows, real activities, an in-memory scheduler)."""

from __future__ import annotations

import json
import os

import pytest
from support.histories import keep
from support.operator_control import ConfigFor, result, start, until, workers
from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState, RecoveryOutcome
from resurrect.contracts.workflow_names import NODE_REPAIR_WORKFLOW
from resurrect.operator.cli import lemons_json
from resurrect.operator.models import NodeRepairState
from resurrect.operator.repair_client import node_state
from resurrect.testing import FakeScheduler

pytestmark = pytest.mark.temporal


def lost_on(scheduler: FakeScheduler, job_id: str, node: str, comment: str) -> JobInfo:
    """Job ``job_id`` ran on ``node`` alone, and the node died (DOWN, NOT_RESPONDING)."""
    scheduler.nodes[node] = scheduler.nodes[node].model_copy(
        update={"state": "DOWN", "flags": ["NOT_RESPONDING", *scheduler.nodes[node].flags]}
    )
    job = JobInfo(
        job_id=job_id,
        name="train",
        state=JobState.NODE_FAIL,
        user="alice",
        user_id=os.getuid(),
        nodes=[node],
        num_nodes=1,
        comment=comment,
    )
    scheduler.jobs[job_id] = job
    return job


def node_back(scheduler: FakeScheduler, node: str) -> None:
    current = scheduler.nodes[node]
    flags = [f for f in current.flags if f != "NOT_RESPONDING"]
    scheduler.nodes[node] = current.model_copy(update={"state": "IDLE", "flags": flags})


def lemon_config(operator_config: ConfigFor, action: str) -> ResurrectConfig:
    return operator_config(
        repair={"enabled": True, "cool_down_s": 1, "probation_s": 0},
        isolation={"health_check_argv": ["true"]},
        policy={"default": {"enabled": False, "lemon_action": action}},
        lemons={"drain_incidents": 3, "lemon_score": 2.5},
    )


async def repair_state(client: Client, config: ResurrectConfig) -> NodeRepairState | None:
    return await node_state(client, config.cluster.name, "node1")


async def lose_node1_three_times(
    client: Client, config: ResurrectConfig, scheduler: FakeScheduler, comment: str
) -> list[RecoveryOutcome]:
    """Jobs 201, 202, 203 each lose node1; it comes back (and is returned) between them."""
    outcomes = []
    for number, job_id in enumerate(("201", "202", "203"), start=1):
        job = lost_on(scheduler, job_id, "node1", comment)
        outcomes.append(await result(client, await start(client, config, job)))
        node_back(scheduler, "node1")
        if number == 3:
            break

        async def returned(expected: int = number) -> bool:
            state = await repair_state(client, config)
            return state is not None and state.returns == expected

        await until(returned, f"node1 back in service ({number})")
    return outcomes


async def test_three_jobs_losing_one_node_make_it_a_lemon_that_the_drain_policy_keeps_out(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = lemon_config(operator_config, "drain")
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    async with workers(temporal_client, config, scheduler, count=1):
        first, second, third = await lose_node1_three_times(
            temporal_client, config, scheduler, json.dumps({"resurrect": True})
        )
        for earlier in (first, second):
            assert earlier.recovered
            assert not any(" is a lemon" in n or "lemon policy" in n for n in earlier.notes)
        assert third.recovered and third.drained_nodes == ["node1"]
        assert any(n.startswith("node1 is a lemon: score 3.00") for n in third.notes)
        assert any("lemon policy drain: drain node1" in n for n in third.notes)

        async def flagged() -> NodeRepairState | None:
            state = await repair_state(temporal_client, config)
            return state if state is not None and state.flagged else None

        state = await until(flagged, "node1 flagged as a lemon")
        assert [i.job_id for i in state.incidents] == ["201", "202", "203"]
        assert {(i.kind, i.tier) for i in state.incidents} == {("node_lost", "independent")}
        assert "drained as a lemon node" in state.events[-1].detail
        assert scheduler.nodes["node1"].drained  # stays out: no return after a passing check
        assert state.returns == 2
        repair = temporal_client.get_workflow_handle(f"node-repair/{config.cluster.name}/node1")
        keep("lemon-drain", await repair.fetch_history())  # replayed by test_replay.py

        rows = await lemons_json(config)
        assert [(r["node"], r["lemon"], r["drain_due"]) for r in rows] == [("node1", True, True)]
        assert [s["incident"]["job_id"] for s in rows[0]["incidents"]] == ["203", "202", "201"]
        query = f"WorkflowType = '{NODE_REPAIR_WORKFLOW}' AND ResurrectLemonScore >= 2"

        async def searchable() -> list[str]:
            return [w.id async for w in temporal_client.list_workflows(query)]

        found = await until(searchable, "node1's score as a search attribute")
        assert found == [f"node-repair/{config.cluster.name}/node1"]


async def test_the_default_flag_policy_only_names_the_lemon_and_its_comment_cannot_drain(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = lemon_config(operator_config, "flag")
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    asks_drain = json.dumps({"resurrect": {"lemon_action": "drain"}})
    async with workers(temporal_client, config, scheduler, count=1):
        *_, third = await lose_node1_three_times(temporal_client, config, scheduler, asks_drain)
        assert third.recovered
        assert any(n.startswith("node1 is a lemon") for n in third.notes)
        assert not any("lemon policy" in n for n in third.notes)

        async def returned() -> NodeRepairState | None:
            state = await repair_state(temporal_client, config)
            return state if state is not None and state.returns == 3 else None

        state = await until(returned, "node1 returned after its third drain")
        assert not state.flagged and len(state.incidents) == 3
