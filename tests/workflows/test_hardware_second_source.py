"""Attack 11: a job that prints a kernel-style Xid line gets its node drained, for free.

A job owner controls every byte the job prints. Printing a shell prompt naming a node and
an ``NVRM: Xid 79`` line made resurrect drain that node and restart the job free of charge
(hardware faults are not the job's fault), again and again until the blast-radius budget
was used up. Now a node is drained, and the restart free, only when a source the job does
not control agrees: the node agent (kernel log, NVML; its NodeHealthWorkflow) or Slurm's
node state. Otherwise the job restarts without draining, charged to its own budget.

Real Temporal dev server, real activities and node-health workflow, a fake scheduler.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from support.builders import interruption, make_config, opt_in
from support.recovery import recover
from support.workers import resurrect_workers
from temporalio.client import Client

from resurrect.config import AgentSettings, ResurrectConfig
from resurrect.contracts import (
    Evidence,
    FaultClass,
    JobInfo,
    JobState,
    RecoveryOutcome,
    SignalKind,
)
from resurrect.contracts.node_health import AgentStopped, NodeFindings, NodeHeartbeat
from resurrect.rules import load_engine
from resurrect.sensors.node_agent.reporters import TemporalReporter
from resurrect.temporal import search_attributes as sa
from resurrect.testing import FakeScheduler

pytestmark = pytest.mark.temporal

FAKE_XID = [
    "alice@node2:~$ dmesg | tail -1",
    "[81234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off"
    " the bus.",
]


@dataclass
class PrintedXid:
    """Job 400 of alice's ran on node1 and node2 (of four) and printed ``FAKE_XID``; a
    recovery worker serves the cluster."""

    client: Client
    config: ResurrectConfig
    scheduler: FakeScheduler

    async def recover(self) -> RecoveryOutcome:
        """The recovery of what the log follower reports for those lines (the job's output,
        nothing else)."""
        evidence = [
            e
            for e in load_engine([]).scan_lines(FAKE_XID, kind=SignalKind.JOB_LOG)
            if e.role == "root"
        ]
        assert evidence and all(e.host == "node2" for e in evidence)
        report = interruption(
            self.config.cluster.name,
            self.scheduler.jobs["400"],
            source="log_tail",
            reason="gpu.hardware in job output (xid.fallen_off_bus)",
            job_state=JobState.RUNNING,
            suspect_nodes=["node2"],
            fault_hint=FaultClass.GPU_HARDWARE,
            evidence=evidence,
        )
        return await recover(self.client, self.config, report)

    async def charged(self, outcome: RecoveryOutcome) -> bool:
        """Whether the recovery counted against the job's restart budget."""
        description = await self.client.get_workflow_handle(outcome.workflow_id).describe()
        return bool(description.typed_search_attributes.get(sa.BUDGET_CHARGED))

    @asynccontextmanager
    async def agent_watching_node2(self) -> AsyncIterator[TemporalReporter]:
        """node2's agent from its first heartbeat (its NodeHealthWorkflow watches the node)
        to its stop."""
        agent = TemporalReporter(
            self.client,
            cluster=self.config.cluster.name,
            task_queue=self.config.temporal.task_queue,
            settings=AgentSettings.model_validate(
                {"node_name": "node2", "silence_threshold_s": 30}
            ),
        )
        now = datetime.now(UTC)
        await agent.heartbeat(
            NodeHeartbeat(node="node2", seq=0, sent_at=now, gpus=8, silence_threshold_s=30)
        )
        yield agent
        await agent.stopped(AgentStopped(node="node2", sent_at=datetime.now(UTC)))


@pytest_asyncio.fixture
async def printed(temporal_client: Client, tmp_path: Path) -> AsyncIterator[PrintedXid]:
    config = make_config(
        tmp_path, mode="act", recovery={"wait_running_timeout_s": 10, "activity_timeout_s": 20}
    )
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    out = tmp_path / "slurm-400.out"
    out.write_text("step 1 loss 2.0\n" + "\n".join(FAKE_XID) + "\n")
    scheduler.jobs["400"] = JobInfo(
        job_id="400",
        state=JobState.FAILED,
        user="alice",
        user_id=1000,
        nodes=["node1", "node2"],
        num_nodes=2,
        comment=opt_in(max_restarts=3),
        stdout_path=str(out),
    )
    async with resurrect_workers(temporal_client, config, scheduler):
        yield PrintedXid(temporal_client, config, scheduler)


def kernel_xid() -> NodeFindings:
    """What node2's agent reads in the kernel log when the GPU really fell off the bus."""
    evidence = Evidence(
        kind=SignalKind.KERNEL_LOG,
        text=FAKE_XID[1],
        rule="xid.fallen_off_bus",
        role="root",
        fault_class=FaultClass.GPU_HARDWARE,
        host="node2",
        observed_at=datetime.now(UTC),
        confidence=0.97,
    )
    return NodeFindings(node="node2", sent_at=datetime.now(UTC), evidence=[evidence])


async def test_a_printed_xid_line_drains_nothing_and_is_charged(printed: PrintedXid) -> None:
    outcome = await printed.recover()
    assert outcome.fault_class is FaultClass.GPU_HARDWARE
    scheduler = printed.scheduler
    assert outcome.drained_nodes == [] and not any(n.drained for n in scheduler.nodes.values())
    assert scheduler.calls == [
        ("requeuehold", "400"),
        ("release", "400"),
    ]  # restarted, without draining
    assert outcome.recovered, outcome.notes
    assert any("only the job's output names it" in note for note in outcome.notes), outcome.notes
    assert any("rests on the job's own output alone" in note for note in outcome.notes), (
        outcome.notes
    )
    assert await printed.charged(outcome)


async def test_a_watching_agent_that_confirms_a_moment_later_gets_the_node_drained(
    printed: PrintedXid,
) -> None:
    """The job's line arrives first; the agent's kernel-log reading a second later."""
    async with printed.agent_watching_node2() as agent:
        recovery = asyncio.create_task(printed.recover())
        await asyncio.sleep(1.5)
        await agent.findings(kernel_xid())
        outcome = await recovery
    assert outcome.drained_nodes == ["node2"], outcome.notes
    assert outcome.recovered and not await printed.charged(outcome)


async def test_a_watching_agent_that_sees_nothing_keeps_the_node_in_service(
    printed: PrintedXid,
) -> None:
    async with printed.agent_watching_node2():
        outcome = await printed.recover()
    assert outcome.drained_nodes == [] and printed.scheduler.calls == [
        ("requeuehold", "400"),
        ("release", "400"),
    ]
    assert await printed.charged(outcome)


async def test_the_same_lines_with_the_node_agent_agreeing_drain_the_node(
    printed: PrintedXid,
) -> None:
    async with printed.agent_watching_node2() as agent:
        await agent.findings(kernel_xid())
        outcome = await printed.recover()
    assert outcome.drained_nodes == ["node2"], outcome.notes
    assert printed.scheduler.calls == [
        ("drain", "node2"),
        ("requeuehold", "400"),
        ("exclude", "400"),
        ("release", "400"),
    ]
    assert outcome.recovered and not await printed.charged(outcome)
    assert not any("rests on the job's own output alone" in note for note in outcome.notes)


async def test_a_finding_the_agent_took_from_the_job_stays_the_jobs_word(
    printed: PrintedXid,
) -> None:
    """What an agent read from a job (a GPU paired with a rank by the rank's environment)
    comes with the job's source: the recovery keeps it, so the node stays in service."""
    findings = kernel_xid()
    from_the_job = [e.model_copy(update={"source": "job_output"}) for e in findings.evidence]
    async with printed.agent_watching_node2() as agent:
        await agent.findings(findings.model_copy(update={"evidence": from_the_job}))
        outcome = await printed.recover()
    assert outcome.drained_nodes == [], outcome.notes
    assert await printed.charged(outcome)
