"""NodeHealthWorkflow on the real Temporal dev server, with its activity under its real name.

The activity is the production ``NodeHealthActivities.report_node_fault`` over a fake
scheduler, with ``report_interruption`` either recorded (most tests) or real (one test: the
job's RecoveryWorkflow is signal-with-started). The silence test runs the real agent as a
process (``python -m sensors.node_agent run``), SIGKILLs it and measures how long the
control plane takes to start the job's recovery.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker

from activities.node_health import NodeHealthActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    Evidence,
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    SignalKind,
)
from resurrect.testing import FakeScheduler
from sensors.node_agent.models import (
    HEALTH_QUERY,
    AgentStopped,
    NodeFindings,
    NodeHealth,
    NodeHeartbeat,
)
from sensors.node_agent.reporters import DeliveryError, TemporalReporter
from sensors.node_agent.settings import AgentSettings
from workflows.node_health import NodeHealthWorkflow

pytestmark = pytest.mark.temporal

REPO = Path(__file__).parents[2]
OPT_IN = json.dumps({"resurrect": True})


@dataclass
class Reported:
    """What the activity's report function received, with the monotonic arrival time."""

    calls: list[tuple[float, Interruption]] = field(default_factory=list)

    async def __call__(self, client: Client, interruption: Interruption, *, task_queue: str) -> str:
        self.calls.append((time.monotonic(), interruption))
        return interruption.workflow_id

    async def wait(self, count: int = 1, timeout: float = 20.0) -> float:
        start = time.monotonic()
        while len(self.calls) < count:
            if time.monotonic() - start > timeout:
                raise AssertionError(f"{len(self.calls)} reports after {timeout}s, wanted {count}")
            await asyncio.sleep(0.05)
        return time.monotonic()


def make_config() -> ResurrectConfig:
    return ResurrectConfig.model_validate(
        {
            "cluster": {"name": f"c{uuid.uuid4().hex[:8]}"},
            "temporal": {"task_queue": f"nh-{uuid.uuid4().hex}"},
        }
    )


def jobs_on(node: str) -> list[JobInfo]:
    return [
        JobInfo(
            job_id="11",
            state=JobState.RUNNING,
            nodes=[node, "other"],
            comment=OPT_IN,
            restart_count=2,
        ),
        JobInfo(job_id="12", state=JobState.RUNNING, nodes=[node], comment=""),  # not opted in
        JobInfo(job_id="13", state=JobState.RUNNING, nodes=["other"], comment=OPT_IN),
        JobInfo(job_id="14", state=JobState.COMPLETED, nodes=[node], comment=OPT_IN),
    ]


@asynccontextmanager
async def worker(
    client: Client, config: ResurrectConfig, node: str, report: Reported | None
) -> AsyncIterator[None]:
    activities = NodeHealthActivities(
        FakeScheduler(jobs=jobs_on(node)), client, config, report=report
    )
    async with Worker(
        client,
        task_queue=config.temporal.task_queue,
        workflows=[NodeHealthWorkflow],
        activities=[activities.report_node_fault],
    ):
        yield


def reporter(
    client: Client, config: ResurrectConfig, node: str, **settings: object
) -> TemporalReporter:
    values: dict[str, object] = {"node_name": node, "silence_threshold_s": 2.0}
    values.update(settings)
    return TemporalReporter(
        client,
        cluster=config.cluster.name,
        task_queue=config.temporal.task_queue,
        settings=AgentSettings.model_validate(values),
    )


def beat(node: str, seq: int) -> NodeHeartbeat:
    return NodeHeartbeat(
        node=node, seq=seq, sent_at=datetime.now(UTC), gpus=8, silence_threshold_s=2.0
    )


def xid79(node: str) -> Evidence:
    return Evidence(
        kind=SignalKind.GPU_EVENT,
        text="NVRM: Xid (PCI:0000:48:00): 79, pid='<unknown>', name=<unknown>, reported by NVML",
        rule="xid.fallen_off_bus",
        role="root",
        fault_class=FaultClass.GPU_HARDWARE,
        host=node,
        gpu="3",
        fields={"xid": "79", "pci": "0000:48:00"},
    )


async def health(client: Client, workflow_id: str) -> NodeHealth:
    state = await client.get_workflow_handle(workflow_id).query(
        HEALTH_QUERY, result_type=NodeHealth
    )
    assert isinstance(state, NodeHealth)
    return state


async def test_root_finding_starts_recovery_of_opted_in_jobs_on_the_node(
    temporal_client: Client,
) -> None:
    config, node, report = make_config(), "gpu-a", Reported()
    out = reporter(temporal_client, config, node)
    async with worker(temporal_client, config, node, report):
        await out.heartbeat(beat(node, 0))
        await out.findings(
            NodeFindings(node=node, sent_at=datetime.now(UTC), evidence=[xid79(node)])
        )
        await report.wait()
        await out.findings(
            NodeFindings(node=node, sent_at=datetime.now(UTC), evidence=[xid79(node)])
        )  # the same: not again
        await out.heartbeat(beat(node, 1))
        await asyncio.sleep(1.0)
        state = await health(temporal_client, out.workflow_id)
        await out.stopped(AgentStopped(node=node, sent_at=datetime.now(UTC)))
        history = await temporal_client.get_workflow_handle(out.workflow_id).fetch_history()
    assert len(report.calls) == 1
    interruption = report.calls[0][1]
    assert (interruption.job_id, interruption.restart_count, interruption.source) == (
        "11",
        2,
        "node_agent",
    )
    assert interruption.suspect_nodes == [node] and interruption.nodes == [node, "other"]
    assert interruption.fault_hint is FaultClass.GPU_HARDWARE
    assert [e.rule for e in interruption.evidence] == ["xid.fallen_off_bus"]
    assert interruption.reason == f"node agent: xid.fallen_off_bus on {node} GPU 3"
    assert (state.status, state.faults_reported, state.last_seq) == ("faulty", 1, 1)
    assert state.reported_jobs == [f"recover/{config.cluster.name}/11/2"]
    await Replayer(
        workflows=[NodeHealthWorkflow], data_converter=pydantic_data_converter
    ).replay_workflow(history)


async def test_silence_is_reported_once_and_a_deliberate_stop_is_not(
    temporal_client: Client,
) -> None:
    config, report = make_config(), Reported()
    silent, stopping = (
        reporter(temporal_client, config, "gpu-s"),
        reporter(temporal_client, config, "gpu-t"),
    )
    async with worker(temporal_client, config, "gpu-s", report):
        for seq in range(3):
            await silent.heartbeat(beat("gpu-s", seq))
            await stopping.heartbeat(beat("gpu-t", seq))
            await asyncio.sleep(0.5)
        await stopping.stopped(AgentStopped(node="gpu-t", sent_at=datetime.now(UTC)))
        await report.wait()
        await asyncio.sleep(3.5)  # longer than the threshold again: no second report
        silent_state = await health(temporal_client, silent.workflow_id)
        stopped_state = await health(temporal_client, stopping.workflow_id)
        await silent.heartbeat(beat("gpu-s", 0))  # the agent is back (restarted)
        await asyncio.sleep(0.5)
        back = await health(temporal_client, silent.workflow_id)
    assert len(report.calls) == 1
    interruption = report.calls[0][1]
    assert interruption.fault_hint is FaultClass.NODE_LOST
    assert interruption.suspect_nodes == ["gpu-s"]
    assert interruption.evidence[0].rule == "node_agent.heartbeat_silence"
    assert interruption.evidence[0].kind is SignalKind.HEARTBEAT
    assert silent_state.status == "silent" and silent_state.silent_since is not None
    assert stopped_state.status == "stopped" and stopped_state.faults_reported == 0
    assert back.status == "healthy" and back.silent_since is None


async def test_history_stays_bounded_with_continue_as_new(temporal_client: Client) -> None:
    config = make_config()
    out = reporter(temporal_client, config, "gpu-c", max_signals_per_run=10)
    async with worker(temporal_client, config, "gpu-c", Reported()):
        await out.heartbeat(beat("gpu-c", 0))
        first = await temporal_client.get_workflow_handle(out.workflow_id).describe()
        for seq in range(1, 25):
            await out.heartbeat(beat("gpu-c", seq))
        await asyncio.sleep(1.0)
        state = await health(temporal_client, out.workflow_id)
        description = await temporal_client.get_workflow_handle(out.workflow_id).describe()
        history = await temporal_client.get_workflow_handle(out.workflow_id).fetch_history()
        await out.stopped(AgentStopped(node="gpu-c", sent_at=datetime.now(UTC)))
    assert state.last_seq == 24 and state.status == "healthy"
    assert description.run_id != first.run_id  # continued as new
    assert len(history.events) < 200


async def test_report_reaches_the_real_recovery_workflow(temporal_client: Client) -> None:
    """With the real report_interruption: the job attempt's recovery workflow exists."""
    config, node = make_config(), "gpu-r"
    activities = NodeHealthActivities(FakeScheduler(jobs=jobs_on(node)), temporal_client, config)
    out = reporter(temporal_client, config, node)
    async with Worker(
        temporal_client,
        task_queue=config.temporal.task_queue,
        workflows=[NodeHealthWorkflow],
        activities=[activities.report_node_fault],
    ):
        await out.heartbeat(beat(node, 0))
        await out.findings(
            NodeFindings(node=node, sent_at=datetime.now(UTC), evidence=[xid79(node)])
        )
        recovery_id = f"recover/{config.cluster.name}/11/2"
        for _ in range(100):
            state = await health(temporal_client, out.workflow_id)
            if state.reported_jobs:
                break
            await asyncio.sleep(0.1)
        await out.stopped(AgentStopped(node=node, sent_at=datetime.now(UTC)))
    assert state.reported_jobs == [recovery_id]
    description = await temporal_client.get_workflow_handle(recovery_id).describe()
    assert description.workflow_type == "RecoveryWorkflow"
    await temporal_client.get_workflow_handle(recovery_id).terminate("test over")


async def test_killed_agent_process_is_detected_within_10s(
    temporal_client: Client, temporal_server: object
) -> None:
    """The real agent (default 2 s heartbeat, 6 s threshold) is SIGKILLed; we measure."""
    config, node, report = make_config(), "gpu-k", Reported()
    env = {
        **os.environ,
        "RESURRECT_TEMPORAL__ADDRESS": temporal_server.address,  # type: ignore[attr-defined]
        "RESURRECT_TEMPORAL__TASK_QUEUE": config.temporal.task_queue,
        "RESURRECT_CLUSTER__NAME": config.cluster.name,
        "RESURRECT_AGENT__NODE_NAME": node,
        "RESURRECT_AGENT__KERNEL_LOG": "false",
        "PYTHONPATH": str(REPO),
    }
    async with worker(temporal_client, config, node, report):
        process = subprocess.Popen(
            [sys.executable, "-m", "sensors.node_agent", "run"],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            workflow_id = f"node-health/{config.cluster.name}/{node}"
            for _ in range(200):  # the agent is up and heartbeating
                try:
                    if (await health(temporal_client, workflow_id)).last_seq >= 2:
                        break
                except Exception:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"agent never heartbeated: {process.stderr}")
            killed = time.monotonic()
            process.send_signal(signal.SIGKILL)
            process.wait()
            detected = await report.wait(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
            assert process.stderr is not None
            process.stderr.close()
    latency = detected - killed
    print(f"\nkilled agent detected after {latency:.2f}s (heartbeat 2s, threshold 6s)")
    assert latency < 10.0
    [(_, interruption)] = report.calls
    assert (interruption.job_id, interruption.fault_hint) == ("11", FaultClass.NODE_LOST)


async def test_control_plane_outage_gives_agents_a_grace_period(temporal_client: Client) -> None:
    """Worker down longer than the threshold: no mass node-loss reports when it returns."""
    config, report = make_config(), Reported()
    back, dead = (
        reporter(temporal_client, config, "gpu-b"),
        reporter(temporal_client, config, "gpu-b2"),
    )
    async with worker(temporal_client, config, "gpu-b2", report):
        await back.heartbeat(beat("gpu-b", 0))
        await dead.heartbeat(beat("gpu-b2", 0))
        await asyncio.sleep(0.5)
    await asyncio.sleep(2.0 + 3.0 + 1.5)  # threshold + stall slack + margin, nobody running
    async with worker(temporal_client, config, "gpu-b2", report):
        await asyncio.sleep(1.0)
        assert report.calls == []  # both timers fired late: grace, not a report

        async def alive() -> None:  # this agent is fine; only its beats failed meanwhile
            for seq in range(1, 1000):
                await back.heartbeat(beat("gpu-b", seq))
                await asyncio.sleep(0.5)

        beating = asyncio.create_task(alive())
        resumed = time.monotonic()
        await report.wait(timeout=10)  # the other one stays silent through its grace
        await asyncio.sleep(2.5)
        beating.cancel()
        b_state = await health(temporal_client, back.workflow_id)
        b2_state = await health(temporal_client, dead.workflow_id)
        await back.stopped(AgentStopped(node="gpu-b", sent_at=datetime.now(UTC)))
    assert [(i.suspect_nodes, i.fault_hint) for _, i in report.calls] == [
        (["gpu-b2"], FaultClass.NODE_LOST)
    ]
    assert report.calls[0][0] - resumed < 4.0
    assert (b_state.status, b_state.stall_graces, b_state.faults_reported) == ("healthy", 1, 0)
    assert (b2_state.status, b2_state.stall_graces, b2_state.faults_reported) == ("silent", 1, 1)


async def test_temporal_reporter_failures(temporal_server: object) -> None:
    """Heartbeats to an unusable namespace are dropped quietly; findings raise DeliveryError."""
    client = await Client.connect(
        temporal_server.address,  # type: ignore[attr-defined]
        namespace=f"missing-{uuid.uuid4().hex[:8]}",
        data_converter=pydantic_data_converter,
    )
    out = reporter(client, make_config(), "gpu-x")
    await out.heartbeat(beat("gpu-x", 0))
    with pytest.raises(DeliveryError):
        await out.findings(
            NodeFindings(node="gpu-x", sent_at=datetime.now(UTC), evidence=[xid79("gpu-x")])
        )
    assert out.failures == 2
