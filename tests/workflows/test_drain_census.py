"""The nodes resurrect keeps out count against the drain budget, and the budget keeps their
census: a worker sends it once per read of it (``reserve_drains_census``), not inside every
reservation; a budget that keeps no census as new refuses the update and the worker sends
it again with its census. The 0.2 update (``reserve_drains``, each reservation carrying the
census) is still served. On the real dev server, with the operator worker."""

from __future__ import annotations

import asyncio
import json

import pytest
from support.histories import keep
from support.operator_control import ConfigFor, workers
from support.operator_control import reserve as reserve_drain
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from resurrect.config import ResurrectConfig
from resurrect.contracts import NodeInfo
from resurrect.contracts.workflow_ids import drain_budget_workflow_id
from resurrect.contracts.workflow_names import RESERVE_DRAINS_CENSUS_UPDATE, RESERVE_DRAINS_UPDATE
from resurrect.operator.budget_client import reservation_for, shape_of
from resurrect.operator.models import DrainCandidate, DrainGrant
from resurrect.scheduler.base import DRAIN_REASON_PREFIX
from resurrect.testing import FakeScheduler
from resurrect.workflows.drain_budget import DrainBudgetWorkflow

pytestmark = pytest.mark.temporal

HELD = 30  # nodes resurrect drained earlier and keeps out (outside any window)
BUDGET = {"max_drain_nodes": HELD + 2, "max_drain_fraction": 1.0, "min_drain_budget": 0}


def cluster_with_held(config: ResurrectConfig, nodes: int = 60) -> FakeScheduler:
    """``nodes`` nodes, the first ``HELD`` drained by resurrect (its reason prefix)."""
    scheduler = FakeScheduler.with_nodes(nodes, cluster_name=config.cluster.name)
    for index, name in enumerate(sorted(scheduler.nodes)[:HELD]):
        node = scheduler.nodes[name]
        scheduler.nodes[name] = node.model_copy(
            update={"state": "DRAIN", "reason": f"{DRAIN_REASON_PREFIX} node.lost job {index}"}
        )
    return scheduler


def free_nodes(scheduler: FakeScheduler) -> list[NodeInfo]:
    return [n for n in scheduler.nodes.values() if not n.drained]


async def reserve(
    client: Client, config: ResurrectConfig, scheduler: FakeScheduler, job_id: str, node: str
) -> DrainGrant:
    workflow_id = f"recover/{config.cluster.name}/{job_id}/0"
    return await reserve_drain(
        client, config, scheduler, node, workflow_id=workflow_id, job_id=job_id
    )


def censuses_sent(history: WorkflowHistory) -> list[int | None]:
    """For each ``reserve_drains_census`` update the budget accepted: the census it carried
    (its node count; None: none)."""
    sent: list[int | None] = []
    for event in history.events:
        if not event.HasField("workflow_execution_update_accepted_event_attributes"):
            continue
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request
        if request.input.name != RESERVE_DRAINS_CENSUS_UPDATE:
            continue
        (payload,) = request.input.args.payloads
        held = json.loads(payload.data)["held"]
        sent.append(None if held is None else len(held))
    return sent


async def replays(client: Client, workflow_id: str, name: str) -> WorkflowHistory:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    keep(name, history)
    replayer = Replayer(workflows=[DrainBudgetWorkflow], data_converter=client.data_converter)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure
    return history


async def test_a_burst_counts_the_held_nodes_and_sends_their_census_once(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = operator_config(isolation=BUDGET)
    scheduler = cluster_with_held(config)
    wanted = [n.name for n in free_nodes(scheduler)][:12]
    async with workers(temporal_client, config, scheduler, count=1):
        first = await reserve(temporal_client, config, scheduler, "1", wanted[0])
        grants = await asyncio.gather(
            *(
                reserve(temporal_client, config, scheduler, str(2 + i), node)
                for i, node in enumerate(wanted[1:])
            )
        )
        workflow_id = drain_budget_workflow_id(config.cluster.name)
        history = await replays(temporal_client, workflow_id, "census-reservations")
    granted = [n for g in [first, *grants] for n in g.granted]
    assert len(granted) == 2 and granted[0] == wanted[0]  # the budget less the 30 held
    assert sum(len(g.denied) for g in grants) == len(wanted) - 2
    sent = censuses_sent(history)
    assert sent[0] == HELD and all(held is None for held in sent[1:]), sent


async def test_a_budget_that_keeps_no_census_refuses_and_the_worker_sends_it_again(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = operator_config(isolation=BUDGET)
    scheduler = cluster_with_held(config)
    one, two, three = [n.name for n in free_nodes(scheduler)][:3]
    workflow_id = drain_budget_workflow_id(config.cluster.name)
    async with workers(temporal_client, config, scheduler, count=1):
        assert (await reserve(temporal_client, config, scheduler, "1", one)).granted == [one]
        # the budget ends (an operator, or a deployment claiming it) and starts again on
        # the next reservation, knowing nothing of the census this worker gave the last one
        await temporal_client.get_workflow_handle(workflow_id).terminate(reason="test")
        assert (await reserve(temporal_client, config, scheduler, "2", two)).granted == [two]
        third = await reserve(temporal_client, config, scheduler, "3", three)
        history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    # the new run's records lost the first drain: 30 held + node two, and room for one more
    assert third.granted == [three]
    assert censuses_sent(history) == [HELD, None]


async def test_the_02_update_with_the_census_in_each_reservation_is_still_served(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = operator_config(isolation=BUDGET)
    scheduler = cluster_with_held(config)
    nodes = list(scheduler.nodes.values())
    held = [DrainCandidate(name=n.name) for n in nodes if n.drained]
    wanted = [n.name for n in free_nodes(scheduler)][:3]
    requests = [
        reservation_for(
            config,
            workflow_id=f"recover/{config.cluster.name}/{i}/0",
            job_id=str(i),
            wanted=[node],
            nodes=nodes,
            shape=shape_of(nodes),
        ).model_copy(update={"held": held})
        for i, node in enumerate(wanted)
    ]
    async with workers(temporal_client, config, scheduler, count=1):
        await reserve(temporal_client, config, scheduler, "0", wanted[0])  # starts it
        handle = temporal_client.get_workflow_handle(drain_budget_workflow_id(config.cluster.name))
        grants = await handle.execute_update(
            RESERVE_DRAINS_UPDATE, requests, result_type=list[DrainGrant]
        )
        await replays(temporal_client, handle.id, "reserve-drains-0.2")
    assert [g.granted for g in grants] == [[wanted[0]], [wanted[1]], []]
