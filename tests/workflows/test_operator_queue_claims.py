"""The operator task queues are the default (``<task_queue>-operator`` for the repair
workflows, ``<task_queue>-operator-budget`` for the drain budget; a budget a release before
started on the operator queue runs on there): a drain-budget or node-repair workflow found
running on any other task queue is ended and started anew on its own (updates and signals to
it would wait for ever). Each process checks where such a workflow runs once, until a call to
it fails. On the real dev server (update-with-start)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.operator_control import ConfigFor, workers
from support.operator_control import reserve as reserve_drain
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)

from resurrect.config import ResurrectConfig
from resurrect.contracts import NodeInfo
from resurrect.contracts.workflow_ids import drain_budget_workflow_id, node_repair_workflow_id
from resurrect.contracts.workflow_names import DRAIN_BUDGET_WORKFLOW, NODE_REPAIR_WORKFLOW
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
    budget_task_queue,
    on_operator_queue,
    operator_task_queue,
    task_queues_of,
)
from resurrect.testing import FakeScheduler
from resurrect.workers.recovery_worker import own_operator_queue

pytestmark = pytest.mark.temporal

BUDGET_OF_ONE = {"max_drain_nodes": 1, "max_drain_fraction": 1.0, "min_drain_budget": 0}


def shared(config: ResurrectConfig) -> ResurrectConfig:
    """The same deployment with one task queue for everything."""
    temporal = config.temporal.model_copy(
        update={"operator_task_queue": config.temporal.task_queue}
    )
    return config.model_copy(update={"temporal": temporal})


async def reserve(
    client: Client, config: ResurrectConfig, nodes: list[NodeInfo], job_id: str, node: str
) -> DrainGrant:
    cluster = FakeScheduler(nodes)
    return await reserve_drain(
        client, config, cluster, node, workflow_id=f"recover/{job_id}", job_id=job_id
    )


def report(job_id: str, kind: Any = "excluded") -> NodeDrainReport:
    return NodeDrainReport(
        incident=f"recover/c/{job_id}/0",
        job_id=job_id,
        fault_class="node.lost",
        reason=f"resurrect: node.lost job {job_id} [recover/c/{job_id}/0]",
        kind=kind,
    )


async def budget_with_a_drain(
    client: Client, cluster: str, task_queue: str
) -> WorkflowHandle[Any, Any]:
    """The cluster's drain budget, started on ``task_queue`` with node1's drain in its window."""
    record = DrainRecord(
        node="node1", partitions=[], workflow_id="w", job_id="1", at=datetime.now(UTC)
    )
    return await client.start_workflow(
        DRAIN_BUDGET_WORKFLOW,
        BudgetState(cluster=cluster, records=[record]),
        id=drain_budget_workflow_id(cluster),
        task_queue=task_queue,
    )


async def describe(client: Client, workflow_id: str) -> WorkflowExecutionDescription:
    return await client.get_workflow_handle(workflow_id).describe()


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
    assert (
        operator_task_queue(shared(config)) == queue and own_operator_queue(shared(config)) is None
    )
    named = operator_config(temporal={"operator_task_queue": "ops"})
    assert operator_task_queue(named) == own_operator_queue(named) == "ops"
    assert budget_task_queue(config) == f"{queue}-operator-budget"
    assert budget_task_queue(named) == "ops-budget"
    assert budget_task_queue(shared(config)) == queue
    budget_id = drain_budget_workflow_id(config.cluster.name)
    assert task_queues_of(config, budget_id) == (f"{queue}-operator-budget", f"{queue}-operator")
    assert task_queues_of(shared(config), budget_id) == (queue,)
    repair_id = node_repair_workflow_id(config.cluster.name, "node1")
    assert task_queues_of(config, repair_id) == (f"{queue}-operator",)


async def test_budget_and_repair_workflows_on_a_foreign_queue_are_ended_and_started_anew(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = operator_config(isolation=BUDGET_OF_ONE, repair={"enabled": True})
    cluster = config.cluster.name
    scheduler = FakeScheduler.with_nodes(8, cluster_name=cluster)
    nodes = list(scheduler.nodes.values())
    elsewhere = f"elsewhere-{uuid.uuid4().hex}"  # another deployment's: no worker of ours
    budget = await budget_with_a_drain(temporal_client, cluster, elsewhere)
    now = datetime.now(UTC)
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
        state = await node_state(temporal_client, cluster, "node3", config)
    assert grant.granted == ["node2"]  # the foreign record was lost with its workflow
    assert state is not None and set(state.exclusions) == {"2"}
    for handle in (budget, repair):
        assert handle.first_execution_run_id is not None
        status = await status_of_run(temporal_client, handle.id, handle.first_execution_run_id)
        assert status is WorkflowExecutionStatus.TERMINATED
        now_there = await describe(temporal_client, handle.id)
        assert now_there.task_queue == task_queues_of(config, handle.id)[0]


async def test_a_budget_started_on_the_operator_queue_before_runs_on_there_with_its_records(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    """Upgraded from a release whose budget ran on the operator queue: the budget is kept
    (its window's drains still count), served by the operator worker."""
    config = operator_config(isolation=BUDGET_OF_ONE)
    cluster = config.cluster.name
    scheduler = FakeScheduler.with_nodes(8, cluster_name=cluster)
    nodes = list(scheduler.nodes.values())
    budget = await budget_with_a_drain(temporal_client, cluster, operator_task_queue(config))
    async with workers(temporal_client, config, scheduler, count=1):
        grant = await reserve(temporal_client, config, nodes, "2", "node2")
    assert grant.denied == ["node2"]  # node1's drain, recorded before, fills the budget of one
    running = await describe(temporal_client, budget.id)
    assert running.run_id == budget.first_execution_run_id
    assert running.task_queue == operator_task_queue(config)


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
