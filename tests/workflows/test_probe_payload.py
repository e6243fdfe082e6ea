"""Audit item (issue 20): a stack probe's answer could exceed Temporal's payload limit.

A node with 256 ranks of a job whose stacks are large (deep recursion, many threads, long
frame names: up to 256 KiB each) answered with up to 64 MiB: past Temporal's 2 MiB payload
limit the answer never arrived, so the node counted as silent and a hang was never
confirmed. Confirmed on the real dev server (here, with 4 MiB). Now an answer is bounded to
1 MiB: each rank gets an equal share, keeps its main thread's innermost frames first, and
one note says what was cut; a small answer is unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

import resurrect.stacks.probe as probe
from resurrect.sensors.node_agent.stack_probe import stack_dumper
from resurrect.stacks.agent_ranks import AgentRanks
from resurrect.stacks.classify import RankStack, judge
from resurrect.stacks.flight_recorder import LastCollective
from resurrect.stacks.probe import (
    DUMP_STACKS_ACTIVITY,
    MAX_PROBE_RESULT_BYTES,
    ProbedRank,
    StackProbeRequest,
    StackProbeResult,
    agent_task_queue,
    probe_here,
)
from resurrect.stacks.pyspy_text import parse_pyspy_dump
from resurrect.workers.recovery_worker import PASSTHROUGH_MODULES
from resurrect.workflows.stack_probe import StackProbeWorkflow

STACKS = Path(__file__).parent.parent / "fixtures" / "stacks"
VICTIM = (STACKS / "gloo-ddp-victim-rank0-native.txt").read_text()
RANKS = 256


def huge_stack(rank: int, size: int) -> str:
    """A rank's py-spy text of ``size`` characters: its main thread in a collective, after
    a thread of many deep frames with long, escape-laden names (the job chooses them)."""
    filler, escapes, long_name = ['Thread 77 (idle): "Filler"'], "\x1b" * 200, "x" * 300
    for number in range((size - len(VICTIM)) // 530):
        filler.append(f"    f{escapes}{number} (lib_{long_name}.py:1)")
    return "\n".join([*VICTIM.splitlines()[:3], *filler, *VICTIM.splitlines()[3:]])[:size]


def hostile_stacks(size: int) -> list[RankStack]:
    return [
        RankStack(rank, "node1", 1000 + rank, "S", None, huge_stack(rank, size), world_size=RANKS,
                  collectives=tuple(LastCollective(rank, f"{pg}{'p' * 190}", 5, "n" * 200, "started")
                                    for pg in range(64)),
                  flight_recorder_note="x" * 2000)
        for rank in range(RANKS)
    ]  # fmt: skip


def probe_of(stacks: list[RankStack], monkeypatch: pytest.MonkeyPatch) -> StackProbeResult:
    monkeypatch.setattr(probe, "collect_job_stacks", lambda *a, **k: stacks)
    request = StackProbeRequest(
        cluster="c1", node="node1", job_id="5", ras=False, gpus=False, owner_uid=1000
    )
    return probe_here(request)


def test_256_ranks_of_256_kib_answer_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    result = probe_of(hostile_stacks(256 << 10), monkeypatch)
    wire = result.model_dump_json().encode()
    assert len(wire) <= MAX_PROBE_RESULT_BYTES < 2 << 20
    assert len(result.ranks) == RANKS
    [note] = [e for e in result.evidence if e.rule == "stack_probe.truncated"]
    assert f"{RANKS} of {RANKS} rank(s) cut" in note.text
    back = StackProbeResult.model_validate_json(wire)
    for stack in back.stacks():
        assert "stack text cut from" in stack.dump_note
        main = stack.dump.main_thread() if stack.dump else None
        assert main is not None and main.name == "MainThread"  # kept first, innermost first
        whole = parse_pyspy_dump(VICTIM).main_thread()
        assert whole is not None and len(main.frames) >= 3
        assert main.frames == whole.frames[: len(main.frames)]
    verdict = judge(back.stacks())
    assert len(verdict.victims) == RANKS  # every rank still placed: in the collective


def test_a_small_answer_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    stacks = [
        RankStack(r, "node1", 10 + r, "S", parse_pyspy_dump(VICTIM), VICTIM, world_size=2)
        for r in range(2)
    ]
    result = probe_of(stacks, monkeypatch)
    assert [r.dump_text for r in result.ranks] == [VICTIM, VICTIM]
    assert [r.dump_note for r in result.ranks] == ["", ""] and result.evidence == []


def answering(activity_fn: Callable[..., StackProbeResult]) -> Callable[[Client], Worker]:
    def worker(client: Client) -> Worker:
        return Worker(
            client,
            task_queue=agent_task_queue("c1", "node1"),
            workflows=[StackProbeWorkflow],
            activities=[activity_fn],
            activity_executor=ThreadPoolExecutor(2),
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules(
                    *PASSTHROUGH_MODULES
                )
            ),
        )

    return worker


@activity.defn(name=DUMP_STACKS_ACTIVITY)
def unbounded_answer(request: StackProbeRequest) -> StackProbeResult:
    """The former answer: every rank's text whole (16 KiB each here: 4 MiB in all)."""
    ranks = [
        ProbedRank(rank=s.rank, node=s.node, pid=s.pid, state=s.state, dump_text=s.dump_text,
                   world_size=s.world_size)
        for s in hostile_stacks(16 << 10)
    ]  # fmt: skip
    return StackProbeResult(node=request.node, ranks=ranks)


def asking(client: Client, job_id: str, answer_within_s: float = 8) -> AgentRanks:
    """The stacks of job ``job_id``'s ranks on node1, waiting ``answer_within_s`` for them (an
    answer that arrives ends the wait)."""
    return AgentRanks(client, asyncio.get_running_loop(), cluster="c1", job_id=job_id,
                      restart_count=0, nodes=["node1"], timeout_s=1,
                      answer_within_s=answer_within_s, gpu_every_s=0)  # fmt: skip


@pytest.mark.temporal
async def test_an_oversized_answer_never_arrives_and_a_bounded_one_does(
    temporal_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with answering(unbounded_answer)(temporal_client):
        lost = await asyncio.to_thread(asking(temporal_client, "61").stacks)
    assert lost == []  # past the payload limit: the node's ranks are missing
    monkeypatch.setattr(probe, "collect_job_stacks", lambda *a, **k: hostile_stacks(256 << 10))
    monkeypatch.setattr(probe, "job_owner_uid", lambda job_id: 1000)  # Slurm's answer
    async with answering(stack_dumper("node1"))(temporal_client):
        ranks = asking(temporal_client, "62", answer_within_s=60)  # it arrives: no wait
        stacks = await asyncio.to_thread(ranks.stacks)
    assert len(stacks) == RANKS and {s.rank for s in stacks} == set(range(RANKS))
    assert judge(stacks).missing == []  # every rank arrived: the stacks can be judged
    assert any(e.rule == "stack_probe.truncated" for e in ranks.evidence())
