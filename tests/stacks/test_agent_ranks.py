"""Asking nodes' agents for a job's stacks (AgentRanks), on a real Temporal dev server:
each node's StackProbeWorkflow runs on that node's task queue; a node whose agent does not
answer is left out within the bound, the others' stacks and NCCL RAS evidence are joined."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
from support.histories import keep
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from resurrect.contracts import Evidence, SignalKind
from resurrect.sensors.node_agent.gpu_activity import GpuActivity, RankGpu
from resurrect.stacks.agent_ranks import AgentRanks
from resurrect.stacks.classify import judge
from resurrect.stacks.probe import (
    DUMP_STACKS_ACTIVITY,
    ProbedRank,
    StackProbeRequest,
    StackProbeResult,
    agent_task_queue,
)
from resurrect.workers.recovery_worker import PASSTHROUGH_MODULES
from resurrect.workflows.stack_probe import StackProbeWorkflow

pytestmark = pytest.mark.temporal

STACKS = Path(__file__).parent.parent / "fixtures" / "stacks"


def probed(rank: int, node: str, state: str, fixture: str) -> ProbedRank:
    text = (STACKS / fixture).read_text()
    return ProbedRank(
        rank=rank, node=node, pid=100 + rank, state=state, dump_text=text, world_size=3
    )


RANKS = {
    "node1": probed(0, "node1", "S", "gloo-ddp-victim-rank0-native.txt"),
    "node2": probed(1, "node2", "T", "gloo-ddp-stopped-rank1-nonblocking.txt"),
}


ASKED: list[StackProbeRequest] = []


def gpu_of(node: str) -> RankGpu:
    rank = RANKS[node].rank
    assert rank is not None
    slow = node == "node2"  # its GPU throttled by the hardware
    activity = GpuActivity(
        rank,
        f"0000:{0x18 + rank:02x}:00",
        None,
        utilisation_pct=97,
        sm_clock_mhz=1200 if slow else 1980,
        reasons=("hw_thermal_slowdown",) if slow else (),
    )
    return RankGpu(rank, node, activity)


@activity.defn(name=DUMP_STACKS_ACTIVITY)
def fake_dump(request: StackProbeRequest) -> StackProbeResult:
    ASKED.append(request)
    if not request.stacks:
        return StackProbeResult(node=request.node, gpus=[gpu_of(request.node)])
    ras = Evidence(
        kind=SignalKind.STACK_DUMP, text="NCCL RAS not available", rule="nccl_ras.unavailable"
    )
    return StackProbeResult(
        node=request.node, ranks=[RANKS[request.node]], gpus=[gpu_of(request.node)], evidence=[ras]
    )


def agent(client: Client, node: str) -> Worker:
    return Worker(
        client,
        task_queue=agent_task_queue("c1", node),
        workflows=[StackProbeWorkflow],
        activities=[fake_dump],
        activity_executor=ThreadPoolExecutor(2),
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
        ),
    )


def asking(
    client: Client, job_id: str, nodes: list[str], within_s: float, *, gpu_every_s: float
) -> AgentRanks:
    """The follower's access to job ``job_id``'s ranks through the agents of ``nodes``."""
    loop = asyncio.get_running_loop()
    return AgentRanks(
        client,
        loop,
        cluster="c1",
        job_id=job_id,
        restart_count=0,
        nodes=nodes,
        answer_within_s=within_s,
        gpu_every_s=gpu_every_s,
    )


async def test_every_answering_node_is_joined_and_a_silent_one_left_out(
    temporal_client: Client,
) -> None:
    # node3's agent does not run; no background GPU probes here
    ranks = asking(temporal_client, "77", ["node1", "node2", "node3"], 4, gpu_every_s=0)
    async with agent(temporal_client, "node1"), agent(temporal_client, "node2"):
        began = time.monotonic()
        stacks = await asyncio.to_thread(ranks.stacks)
    assert time.monotonic() - began < 4 + 3  # the silent node costs the bound, no more
    assert sorted((s.rank, s.node, s.state) for s in stacks) == [
        (0, "node1", "S"),
        (1, "node2", "T"),
    ]
    # node3's rank is missing: the stacks confirm nothing (hang_unconfirmed_s decides)
    assert judge(stacks).missing == [2] and judge(stacks).culprits == []
    whole = [s for s in stacks if s.rank is not None]
    two = judge([replace(s, world_size=2) for s in whole])
    assert [c.rank for c in two.culprits] == [1] and [v.rank for v in two.victims] == [0]
    assert [e.rule for e in ranks.evidence()] == ["nccl_ras.unavailable"] * 2
    assert ranks.waits() == []
    assert [g.rank for g in ranks.gpus()] == [0, 1]  # the stacks' probe brought GPUs too
    prefix = "stack-probe/c1/77/0/node2/"
    async for probe in temporal_client.list_workflows("WorkflowType = 'StackProbeWorkflow'"):
        if probe.id.startswith(prefix):  # its history, for the replay tests
            keep(
                "stopped-rank", await temporal_client.get_workflow_handle(probe.id).fetch_history()
            )
            break


async def test_gpu_activity_is_refreshed_in_the_background_without_stacks(
    temporal_client: Client,
) -> None:
    ranks = asking(temporal_client, "78", ["node1", "node2"], 10, gpu_every_s=3600)
    ASKED.clear()
    async with agent(temporal_client, "node1"), agent(temporal_client, "node2"):
        assert await asyncio.to_thread(ranks.gpus) == []  # asked now, answered later
        deadline = time.monotonic() + 10
        found = []
        while not found and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            found = await asyncio.to_thread(ranks.gpus)
    assert sorted((g.rank, g.node, g.activity.sm_clock_mhz) for g in found) == [
        (0, "node1", 1980),
        (1, "node2", 1200),
    ]
    assert [g.rank for g in found if g.activity.hardware_slowdown] == [1]
    asked = [a for a in ASKED if a.job_id == "78"]
    assert {(a.stacks, a.ras) for a in asked} == {(False, False)}  # no rank was paused
    assert len(asked) == 2  # once per node within gpu_every_s
