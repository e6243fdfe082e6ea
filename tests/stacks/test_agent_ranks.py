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
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from resurrect.contracts import Evidence, SignalKind
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


@activity.defn(name=DUMP_STACKS_ACTIVITY)
def fake_dump(request: StackProbeRequest) -> StackProbeResult:
    ras = Evidence(
        kind=SignalKind.STACK_DUMP, text="NCCL RAS not available", rule="nccl_ras.unavailable"
    )
    return StackProbeResult(node=request.node, ranks=[RANKS[request.node]], evidence=[ras])


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


async def test_every_answering_node_is_joined_and_a_silent_one_left_out(
    temporal_client: Client,
) -> None:
    ranks = AgentRanks(
        temporal_client,
        asyncio.get_running_loop(),
        cluster="c1",
        job_id="77",
        restart_count=0,
        nodes=["node1", "node2", "node3"],  # node3's agent does not run
        timeout_s=5,
        answer_within_s=4,
    )
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
    assert ranks.waits() == [] and ranks.gpus() == []
