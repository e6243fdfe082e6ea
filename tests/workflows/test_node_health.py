"""NodeHealthWorkflow with its activity under its real name.

The activity is the production ``NodeHealthActivities.report_node_fault`` over a fake
scheduler, with ``report_interruption`` either recorded (most tests) or real (one test: the
job's RecoveryWorkflow is signal-with-started). Timer logic (heartbeat silence, a control
plane outage, de-duplication, continue-as-new) runs on the time-skipping test server, where
time moves only when the test moves it. On the real dev server: the report reaching a real
RecoveryWorkflow, the real agent process SIGKILLed (how long until its job's recovery
starts, in wall time), and delivery failures of the reporter.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.builders import OPT_IN, make_config
from support.histories import keep
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from resurrect.activities.node_health import NodeHealthActivities
from resurrect.config import AgentSettings, ResurrectConfig
from resurrect.contracts import (
    Evidence,
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    SignalKind,
)
from resurrect.contracts.node_health import (
    HEALTH_QUERY,
    HEARTBEAT_SIGNAL,
    NODE_SILENT_SIGNAL,
    AgentStopped,
    NodeFindings,
    NodeHealth,
    NodeHealthInput,
    NodeHeartbeat,
    NodeSilent,
)
from resurrect.sensors.node_agent.reporters import DeliveryError, TemporalReporter
from resurrect.testing import FakeScheduler
from resurrect.workflows.node_health import STALL_SLACK_S, NodeHealthWorkflow

REPO = Path(__file__).parents[2]


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
    client: Client,
    config: ResurrectConfig,
    node: str,
    report: Reported | None,
    *,
    sticky: bool = True,
) -> AsyncIterator[None]:
    activities = NodeHealthActivities(
        FakeScheduler(jobs=jobs_on(node)), client, config, report=report
    )
    async with Worker(
        client,
        task_queue=config.temporal.task_queue,
        workflows=[NodeHealthWorkflow],
        activities=[activities.report_node_fault],
        # sticky=False: a worker started after another stopped (an outage) gets the
        # workflows at once instead of after the sticky queue's timeout
        max_cached_workflows=100 if sticky else 0,
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


def beat(node: str, seq: int, threshold_s: float = 2.0) -> NodeHeartbeat:
    return NodeHeartbeat(
        node=node, seq=seq, sent_at=datetime.now(UTC), gpus=8, silence_threshold_s=threshold_s
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


async def until(
    client: Client, workflow_id: str, ok: Callable[[NodeHealth], bool], what: str
) -> NodeHealth:
    """Poll the health query (wall time, briefly) until the workflow has caught up."""
    state: NodeHealth | None = None
    for _ in range(200):
        try:
            state = await health(client, workflow_id)
            if ok(state):
                return state
        except RPCError:
            pass  # not started yet
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id}: never {what}; last {state}")


async def replayed_and_kept(name: str, history: WorkflowHistory) -> None:
    """Today's code replays ``history``, which issued the commands of the stored one."""
    await Replayer(
        workflows=[NodeHealthWorkflow], data_converter=pydantic_data_converter
    ).replay_workflow(history)
    keep(name, history)


def collector_silence(node: str, seq: int) -> NodeSilent:
    """The collector's verdict that ``node``'s agent fell silent after beat ``seq``."""
    return NodeSilent(
        node=node,
        last_heartbeat_at=datetime.now(UTC),
        last_seq=seq,
        silent_for_s=3.0,
        silence_threshold_s=3.0,
    )


async def test_root_finding_starts_recovery_of_opted_in_jobs_on_the_node(
    time_skipping: WorkflowEnvironment,
) -> None:
    client, config, node, report = time_skipping.client, make_config(), "gpu-a", Reported()
    out = reporter(client, config, node)
    async with worker(client, config, node, report):
        await out.heartbeat(beat(node, 0))
        await out.findings(
            NodeFindings(node=node, sent_at=datetime.now(UTC), evidence=[xid79(node)])
        )
        await until(client, out.workflow_id, lambda h: h.faults_reported == 1, "reported")
        await out.findings(
            NodeFindings(node=node, sent_at=datetime.now(UTC), evidence=[xid79(node)])
        )  # the same again, within the de-duplication window: not reported again
        await out.heartbeat(beat(node, 1))
        state = await until(client, out.workflow_id, lambda h: h.last_seq == 1, "seq 1")
        await out.stopped(AgentStopped(node=node, sent_at=datetime.now(UTC)))
        history = await client.get_workflow_handle(out.workflow_id).fetch_history()
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
    await replayed_and_kept("root-finding", history)


async def test_the_same_finding_is_reported_again_after_the_dedup_window(
    time_skipping: WorkflowEnvironment,
) -> None:
    client, config, node, report = time_skipping.client, make_config(), "gpu-d", Reported()
    out = reporter(client, config, node)
    found = NodeFindings(node=node, sent_at=datetime.now(UTC), evidence=[xid79(node)])
    async with worker(client, config, node, report):
        await out.heartbeat(beat(node, 0, threshold_s=3600))
        await out.findings(found)
        await until(client, out.workflow_id, lambda h: h.faults_reported == 1, "reported")
        await time_skipping.sleep(200)
        await out.findings(found)  # within report_dedup_s (300 s): not again
        await out.heartbeat(beat(node, 1, threshold_s=3600))
        await until(client, out.workflow_id, lambda h: h.last_seq == 1, "seq 1")
        assert len(report.calls) == 1
        await time_skipping.sleep(101)
        await out.findings(found)
        state = await until(client, out.workflow_id, lambda h: h.faults_reported == 2, "again")
        await out.stopped(AgentStopped(node=node, sent_at=datetime.now(UTC)))
    assert len(report.calls) == 2 and state.status == "faulty"


async def test_silence_is_reported_once_and_a_deliberate_stop_is_not(
    time_skipping: WorkflowEnvironment,
) -> None:
    client, config, report = time_skipping.client, make_config(), Reported()
    silent, stopping = reporter(client, config, "gpu-s"), reporter(client, config, "gpu-t")
    async with worker(client, config, "gpu-s", report):
        for seq in range(3):
            await silent.heartbeat(beat("gpu-s", seq))
            await stopping.heartbeat(beat("gpu-t", seq))
        await until(client, silent.workflow_id, lambda h: h.last_seq == 2, "seq 2")
        await stopping.stopped(AgentStopped(node="gpu-t", sent_at=datetime.now(UTC)))
        await time_skipping.sleep(1.5)  # within the 2 s threshold: nothing
        assert report.calls == []
        await time_skipping.sleep(1.0)  # past it
        silent_state = await until(
            client, silent.workflow_id, lambda h: h.faults_reported == 1, "reported"
        )
        await time_skipping.sleep(10)  # silent for much longer: still one report
        stopped_state = await health(client, stopping.workflow_id)
        await silent.heartbeat(beat("gpu-s", 0))  # the agent is back (restarted)
        back = await until(client, silent.workflow_id, lambda h: h.status != "silent", "back")
        history = await client.get_workflow_handle(silent.workflow_id).fetch_history()
    await replayed_and_kept("silence", history)
    assert len(report.calls) == 1
    interruption = report.calls[0][1]
    assert interruption.fault_hint is FaultClass.NODE_LOST
    assert interruption.suspect_nodes == ["gpu-s"]
    assert interruption.evidence[0].rule == "node_agent.heartbeat_silence"
    assert interruption.evidence[0].kind is SignalKind.HEARTBEAT
    assert 2.0 <= float(interruption.evidence[0].fields["silent_s"]) < 3.0
    assert silent_state.status == "silent" and silent_state.silent_since is not None
    assert stopped_state.status == "stopped" and stopped_state.faults_reported == 0
    assert back.status == "healthy" and back.silent_since is None


@pytest.mark.temporal
async def test_a_direct_heartbeat_older_than_the_collectors_leaves_the_watch_to_the_collector(
    time_skipping: WorkflowEnvironment,
) -> None:
    """An agent back in contact sends its first heartbeats to the collector and directly; the
    direct copy of the beat the collector already forwarded arrives last. The collector keeps
    the watch: no silence timer of the workflow's own reports the agent that no longer beats
    directly, and the collector's next silence verdict is reported."""
    client, config, report = time_skipping.client, make_config(), Reported()
    agent = reporter(client, config, "gpu-b")
    handle = client.get_workflow_handle(agent.workflow_id)
    async with worker(client, config, "gpu-b", report):
        await agent.heartbeat(beat("gpu-b", 1))  # fell back: directly
        back = beat("gpu-b", 2)
        forwarded = back.model_copy(update={"watched_by_collector": True})
        await handle.signal(HEARTBEAT_SIGNAL, forwarded)  # the collector heard it first
        await agent.heartbeat(back)  # the same beat, directly, arriving after
        await until(client, agent.workflow_id, lambda h: h.last_seq == 2, "seq 2")
        await time_skipping.sleep(5.0)  # past the 2 s threshold: the agent beats the collector
        assert report.calls == []
        state = await health(client, agent.workflow_id)
        assert state.watched_by_collector and state.status != "silent"
        await handle.signal(NODE_SILENT_SIGNAL, collector_silence("gpu-b", 9))
        await until(client, agent.workflow_id, lambda h: h.faults_reported == 1, "reported")
        history = await handle.fetch_history()
    await replayed_and_kept("stale-direct-beat-keeps-collector", history)
    assert len(report.calls) == 1
    assert report.calls[0][1].evidence[0].rule == "node_agent.heartbeat_silence"


async def test_a_silence_reported_after_the_agent_was_heard_again_leaves_the_node_watched(
    time_skipping: WorkflowEnvironment,
) -> None:
    """The collector's silence verdict and the agent's return reach the workflow together:
    the silence is reported, the node is not left marked silent, and the collector's next
    silence verdict is reported too."""
    client, config, report = time_skipping.client, make_config(), Reported()
    handle = client.get_workflow_handle(reporter(client, config, "gpu-r").workflow_id)
    first = beat("gpu-r", 1).model_copy(update={"watched_by_collector": True})
    await client.start_workflow(
        NodeHealthWorkflow.run,
        NodeHealthInput(cluster=config.cluster.name, node="gpu-r", silence_threshold_s=2.0),
        id=handle.id,
        task_queue=config.temporal.task_queue,
        start_signal=HEARTBEAT_SIGNAL,
        start_signal_args=[first],
    )
    await handle.signal(NODE_SILENT_SIGNAL, collector_silence("gpu-r", 1))
    back = beat("gpu-r", 2).model_copy(update={"watched_by_collector": True})
    await handle.signal(HEARTBEAT_SIGNAL, back)
    async with worker(client, config, "gpu-r", report):
        await until(client, handle.id, lambda h: h.faults_reported == 1, "the first reported")
        assert (await health(client, handle.id)).status != "silent"
        await handle.signal(NODE_SILENT_SIGNAL, collector_silence("gpu-r", 2))
        await until(client, handle.id, lambda h: h.faults_reported == 2, "the second reported")
        history = await handle.fetch_history()
    await replayed_and_kept("silence-after-return-keeps-health", history)
    assert len(report.calls) == 2


async def test_history_stays_bounded_with_continue_as_new(temporal_client: Client) -> None:
    client, config = temporal_client, make_config()
    out = reporter(client, config, "gpu-c", max_signals_per_run=10)
    async with worker(client, config, "gpu-c", Reported()):
        await out.heartbeat(beat("gpu-c", 0, threshold_s=600))
        first = await client.get_workflow_handle(out.workflow_id).describe()
        for seq in range(1, 25):
            await out.heartbeat(beat("gpu-c", seq, threshold_s=600))
        state = await until(client, out.workflow_id, lambda h: h.last_seq == 24, "seq 24")
        description = await client.get_workflow_handle(out.workflow_id).describe()
        history = await client.get_workflow_handle(out.workflow_id).fetch_history()
        await out.stopped(AgentStopped(node="gpu-c", sent_at=datetime.now(UTC)))
    assert state.last_seq == 24 and state.status == "healthy"
    assert description.run_id != first.run_id  # continued as new
    assert len(history.events) < 200


async def test_control_plane_outage_gives_agents_a_grace_period(
    time_skipping: WorkflowEnvironment,
) -> None:
    """Worker down longer than the threshold: no mass node-loss reports when it returns;
    an agent that stays silent through its grace is reported, one that beats is not."""
    client, config, report = time_skipping.client, make_config(), Reported()
    back, dead = reporter(client, config, "gpu-b"), reporter(client, config, "gpu-b2")
    async with worker(client, config, "gpu-b2", report, sticky=False):
        await back.heartbeat(beat("gpu-b", 0))
        await dead.heartbeat(beat("gpu-b2", 0))
        for out in (back, dead):
            await until(client, out.workflow_id, lambda h: h.status == "healthy", "healthy")
    # nobody runs the workflows for threshold + stall slack + margin: both timers fire late
    await time_skipping.sleep(2.0 + STALL_SLACK_S + 1.5)
    async with worker(client, config, "gpu-b2", report, sticky=False):
        for out in (back, dead):
            await until(client, out.workflow_id, lambda h: h.stall_graces == 1, "graced")
        assert report.calls == []  # grace, not a report
        for seq in range(1, 7):  # this agent is fine (only its beats failed meanwhile)
            await back.heartbeat(beat("gpu-b", seq))
            await time_skipping.sleep(0.5)
        b2_state = await until(client, dead.workflow_id, lambda h: h.status == "silent", "lost")
        b_state = await health(client, back.workflow_id)
        await back.stopped(AgentStopped(node="gpu-b", sent_at=datetime.now(UTC)))
    assert [(i.suspect_nodes, i.fault_hint) for _, i in report.calls] == [
        (["gpu-b2"], FaultClass.NODE_LOST)
    ]
    assert (b_state.status, b_state.stall_graces, b_state.faults_reported) == ("healthy", 1, 0)
    assert (b2_state.status, b2_state.stall_graces, b2_state.faults_reported) == ("silent", 1, 1)


@pytest.mark.temporal
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


@pytest.mark.temporal
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
            [sys.executable, "-m", "resurrect.sensors.node_agent", "run"],
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


@pytest.mark.temporal
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
