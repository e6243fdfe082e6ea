"""The operator task queue is the default (``<task_queue>-operator``): the drain-budget and
node-repair workflows the former default started on the recoveries' task queue move over
(``move_to_task_queue``: continue as new, their state carried), never ended; those on any
other task queue are still ended. Each process checks where such a workflow runs once.

The budget and claims run on the real dev server (update-with-start), the repair under way
on the time-skipping server (its cool-down passes at once)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.operator_control import ConfigFor, until, workers
from support.workers import resurrect_workers
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
)
from temporalio.testing import WorkflowEnvironment

from resurrect.config import ResurrectConfig
from resurrect.contracts import NodeInfo
from resurrect.contracts.workflow_ids import drain_budget_workflow_id, node_repair_workflow_id
from resurrect.operator.budget_client import budget_state, reservation_for, reserve_drains
from resurrect.operator.models import (
    BudgetState,
    DrainGrant,
    DrainRecord,
    NodeDrainReport,
    NodeRepairState,
    RepairTimings,
)
from resurrect.operator.repair_client import node_state, report_to_repair
from resurrect.operator.task_queues import (
    hand_over_at_start,
    on_operator_queue,
    operator_task_queue,
    our_task_queues,
)
from resurrect.scheduler.view import shape_of
from resurrect.testing import FakeScheduler
from resurrect.workers.recovery_worker import own_operator_queue
from resurrect.workflows.names import DRAIN_BUDGET_WORKFLOW, NODE_REPAIR_WORKFLOW

pytestmark = pytest.mark.temporal

BUDGET_OF_ONE = {"max_drain_nodes": 1, "max_drain_fraction": 1.0, "min_drain_budget": 0}


def shared(config: ResurrectConfig) -> ResurrectConfig:
    """The same deployment as the former default ran it: one task queue for everything."""
    temporal = config.temporal.model_copy(
        update={"operator_task_queue": config.temporal.task_queue}
    )
    return config.model_copy(update={"temporal": temporal})


async def reserve(
    client: Client, config: ResurrectConfig, nodes: list[NodeInfo], job_id: str, node: str
) -> DrainGrant:
    request = reservation_for(
        config,
        workflow_id=f"recover/{job_id}",
        job_id=job_id,
        wanted=[node],
        nodes=nodes,
        shape=shape_of(nodes),
    )
    return await reserve_drains(client, config, request, FakeScheduler(nodes), observe=False)


def report(job_id: str, kind: Any = "excluded") -> NodeDrainReport:
    return NodeDrainReport(
        incident=f"recover/c/{job_id}/0",
        job_id=job_id,
        fault_class="node.lost",
        reason=f"resurrect: node.lost job {job_id} [recover/c/{job_id}/0]",
        kind=kind,
    )


async def describe(client: Client, workflow_id: str) -> WorkflowExecutionDescription:
    return await client.get_workflow_handle(workflow_id).describe()


async def moved_to(client: Client, workflow_id: str, task_queue: str) -> None:
    async def there() -> bool:
        return (await describe(client, workflow_id)).task_queue == task_queue

    await until(there, f"{workflow_id} on {task_queue}")


async def status_of_run(client: Client, workflow_id: str, run_id: str) -> Any:
    return (await client.get_workflow_handle(workflow_id, run_id=run_id).describe()).status


# ---------------------------------------------------------------------------- the setting
def test_the_operator_queue_is_its_own_by_default_and_shared_only_when_named_so(
    tmp_path: Path, operator_config: ConfigFor
) -> None:
    config = operator_config()
    queue = config.temporal.task_queue
    assert config.temporal.operator_task_queue is None
    assert operator_task_queue(config) == own_operator_queue(config) == f"{queue}-operator"
    assert our_task_queues(config) == {queue, f"{queue}-operator"}
    assert (
        operator_task_queue(shared(config)) == queue and own_operator_queue(shared(config)) is None
    )
    assert our_task_queues(shared(config)) == {queue}
    named = operator_config(temporal={"operator_task_queue": "ops"})
    assert operator_task_queue(named) == own_operator_queue(named) == "ops"


# ---------------------------------------------------------------------------- hand-over
async def test_budget_and_repair_workflows_on_the_recoveries_queue_move_with_their_records(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = operator_config(isolation=BUDGET_OF_ONE, repair={"enabled": True})
    former = shared(config)
    cluster, queue = config.cluster.name, config.temporal.task_queue
    scheduler = FakeScheduler.with_nodes(8, cluster_name=cluster)
    nodes = list(scheduler.nodes.values())
    budget_id = drain_budget_workflow_id(cluster)
    repair_id = node_repair_workflow_id(cluster, "node3")
    async with workers(temporal_client, config, scheduler, count=1):
        # started under the former default, on the recoveries' task queue
        assert (await reserve(temporal_client, former, nodes, "1", "node1")).granted == ["node1"]
        assert (await reserve(temporal_client, former, nodes, "2", "node4")).tripped
        await report_to_repair(temporal_client, former, "node3", report("1"))
        budget_run = (await describe(temporal_client, budget_id)).run_id
        repair_run = (await describe(temporal_client, repair_id)).run_id
        assert (await describe(temporal_client, budget_id)).task_queue == queue
        # not moved yet, still served there: reads with the new default accept it
        seen = await node_state(temporal_client, cluster, "node3", our_task_queues(config))
        assert seen is not None and set(seen.exclusions) == {"1"}
        asked = reservation_for(
            config,
            workflow_id="recover/3",
            job_id="3",
            wanted=["node2"],
            nodes=nodes,
            shape=shape_of(nodes),
        )
        observed = await reserve_drains(temporal_client, config, asked, scheduler, observe=True)
        assert observed.denied == ["node2"]  # node1's drain counts
        # the new default: the next reservation and report hand them over
        third = await reserve(temporal_client, config, nodes, "3", "node2")
        await report_to_repair(temporal_client, config, "node3", report("3"))
        operators = operator_task_queue(config)
        await moved_to(temporal_client, budget_id, operators)
        await moved_to(temporal_client, repair_id, operators)
        budget = await budget_state(temporal_client, cluster)
        repair = await node_state(temporal_client, cluster, "node3", our_task_queues(config))
    assert third.denied == ["node2"], third  # the records came along: still one drained
    assert budget is not None and [r.node for r in budget.records] == ["node1"]
    assert budget.trips == 1 and budget.denied_total == 2
    assert repair is not None and set(repair.exclusions) == {"1", "3"}
    for workflow_id, run_id in ((budget_id, budget_run), (repair_id, repair_run)):
        status = await status_of_run(temporal_client, workflow_id, run_id)
        assert status is WorkflowExecutionStatus.CONTINUED_AS_NEW, (workflow_id, status)


async def test_a_worker_starting_moves_the_budget_before_any_drain_and_leaves_a_foreign_one(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    # the first burst after an upgrade reserves from a budget on its own queue, not from one
    # waiting on the recoveries' queue for a workflow-task slot the draining recoveries hold
    config = operator_config(isolation=BUDGET_OF_ONE)
    cluster = config.cluster.name
    scheduler = FakeScheduler.with_nodes(8, cluster_name=cluster)
    nodes = list(scheduler.nodes.values())
    budget_id = drain_budget_workflow_id(cluster)
    async with workers(temporal_client, config, scheduler, count=1):
        await reserve(temporal_client, shared(config), nodes, "1", "node1")
        await hand_over_at_start(temporal_client, config.model_copy(update={"mode": "observe"}))
        still = await describe(temporal_client, budget_id)
        assert still.task_queue == config.temporal.task_queue  # observe mode moves nothing
        await hand_over_at_start(temporal_client, config)
        await moved_to(temporal_client, budget_id, operator_task_queue(config))
        state = await budget_state(temporal_client, cluster)
    assert state is not None and [r.node for r in state.records] == ["node1"]
    other = operator_config(isolation=BUDGET_OF_ONE, cluster={"name": cluster})
    await hand_over_at_start(temporal_client, other)  # another deployment's start ends nothing
    now_there = await describe(temporal_client, budget_id)
    assert now_there.status is WorkflowExecutionStatus.RUNNING
    assert now_there.task_queue == operator_task_queue(config)


async def test_budget_and_repair_workflows_on_a_foreign_queue_are_ended_and_started_anew(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = operator_config(isolation=BUDGET_OF_ONE, repair={"enabled": True})
    cluster = config.cluster.name
    scheduler = FakeScheduler.with_nodes(8, cluster_name=cluster)
    nodes = list(scheduler.nodes.values())
    elsewhere = f"elsewhere-{uuid.uuid4().hex}"  # another deployment's: no worker of ours
    now = datetime.now(UTC)
    record = DrainRecord(node="node1", partitions=[], workflow_id="w", job_id="1", at=now)
    budget = await temporal_client.start_workflow(
        DRAIN_BUDGET_WORKFLOW,
        BudgetState(cluster=cluster, records=[record]),
        id=drain_budget_workflow_id(cluster),
        task_queue=elsewhere,
    )
    timings = RepairTimings(
        cool_down_s=1, check_timeout_s=1, recheck_interval_s=1, max_checks=1, probation_s=0
    )
    repair = await temporal_client.start_workflow(
        NODE_REPAIR_WORKFLOW,
        NodeRepairState(cluster=cluster, node="node3", timings=timings, exclusions={"1": now}),
        id=node_repair_workflow_id(cluster, "node3"),
        task_queue=elsewhere,
    )
    async with workers(temporal_client, config, scheduler, count=1):
        grant = await reserve(temporal_client, config, nodes, "2", "node2")
        await report_to_repair(temporal_client, config, "node3", report("2"))
        state = await node_state(temporal_client, cluster, "node3", our_task_queues(config))
    assert grant.granted == ["node2"]  # the foreign record was lost with its workflow
    assert state is not None and set(state.exclusions) == {"2"}
    for handle in (budget, repair):
        assert handle.first_execution_run_id is not None
        status = await status_of_run(temporal_client, handle.id, handle.first_execution_run_id)
        assert status is WorkflowExecutionStatus.TERMINATED
        now_there = await describe(temporal_client, handle.id)
        assert now_there.task_queue == operator_task_queue(config)


async def test_a_repair_under_way_finishes_before_it_moves_and_its_waiting_drains_go_along(
    time_skipping: WorkflowEnvironment, tmp_path: Path
) -> None:
    env, client = time_skipping, time_skipping.client
    config = ResurrectConfig.model_validate(
        {
            "mode": "act",
            "cluster": {"name": f"t{uuid.uuid4().hex[:8]}"},
            "temporal": {"task_queue": f"q-{uuid.uuid4().hex}", "state_dir": str(tmp_path)},
            "isolation": {"health_check_argv": ["true"]},
            "repair": {"cool_down_s": 300, "max_checks": 1, "probation_s": 0},
        }
    )
    cluster, queue = config.cluster.name, config.temporal.task_queue
    scheduler = FakeScheduler.with_nodes(2, cluster_name=cluster)
    repair_id = node_repair_workflow_id(cluster, "node1")
    first, second = report("1", "drained"), report("2", "drained")
    async with resurrect_workers(client, config, scheduler):
        await scheduler.drain_node("node1", first.reason)
        await report_to_repair(client, shared(config), "node1", first)  # the former default
        await env.sleep(60)
        former_run = (await describe(client, repair_id)).run_id
        # another drain reported with the new default, in the middle of the cool-down
        await report_to_repair(client, config, "node1", second)
        await env.sleep(60)
        waiting = await node_state(client, cluster, "node1", our_task_queues(config))
        assert (await describe(client, repair_id)).task_queue == queue
        assert waiting is not None and waiting.status == "cooling_down"
        assert waiting.pending == [second] and waiting.drains == 1
        await env.sleep(300)  # the cool-down ends: checked, returned, then moved
        await moved_to(client, repair_id, operator_task_queue(config))
        await env.sleep(400)  # the second drain's cool-down, on the operator queue

        async def repaired() -> NodeRepairState | None:
            state = await node_state(client, cluster, "node1", our_task_queues(config))
            return state if state is not None and state.events[-1].kind != "drained" else None

        state = await until(repaired, "the second drain's check")
    assert [(e.kind, e.job_id) for e in state.events] == [
        ("drained", "1"),
        ("check_passed", "1"),
        ("returned", "1"),
        ("drained", "2"),
        ("not_ours", "2"),  # resumed by the first repair meanwhile
    ]
    assert state.drains == 2 and state.returns == 1 and not state.pending
    assert set(state.exclusions) == {"1", "2"}
    assert await status_of_run(client, repair_id, former_run) is (
        WorkflowExecutionStatus.CONTINUED_AS_NEW
    )


# ---------------------------------------------------------------------------- claims
class CountDescribes(Interceptor):
    """Counts the ``describe`` calls a client makes, by workflow id."""

    def __init__(self) -> None:
        self.described: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.described)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, described: list[str]) -> None:
        super().__init__(next)
        self.described = described

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
        self.described.append(input.id)
        return await super().describe_workflow(input)


async def test_a_process_describes_each_operator_workflow_once_until_a_call_to_it_fails(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = operator_config(
        isolation={"max_drain_fraction": 1.0, "min_drain_budget": 8}, repair={"enabled": True}
    )
    cluster = config.cluster.name
    scheduler = FakeScheduler.with_nodes(8, cluster_name=cluster)
    nodes = list(scheduler.nodes.values())
    counter = CountDescribes()
    client = Client(**{**temporal_client.config(), "interceptors": [counter]})
    budget_id = drain_budget_workflow_id(cluster)
    repair_id = node_repair_workflow_id(cluster, "node1")

    async def refused() -> None:
        raise RuntimeError("the call failed")

    async with workers(temporal_client, config, scheduler, count=1):
        burst = [reserve(client, config, nodes, str(i), f"node{i}") for i in range(1, 6)]
        grants = await asyncio.gather(*burst)
        grants.append(await reserve(client, config, nodes, "6", "node6"))
        await report_to_repair(client, config, "node1", report("1", "drained"))
        await report_to_repair(client, config, "node1", report("2"))
        assert counter.described == [budget_id, repair_id]
        with pytest.raises(RuntimeError):
            await on_operator_queue(client, config, budget_id, refused)
        await reserve(client, config, nodes, "7", "node7")
        await reserve(client, config, nodes, "8", "node8")
    assert [g.granted for g in grants] == [[f"node{i}"] for i in range(1, 7)]
    assert counter.described == [budget_id, repair_id, budget_id]  # checked again once
