"""Attack 17: NodeHealthWorkflow ended, losing its node's state, when its report failed.

Its report activity was retried at most 10 times; a longer controller outage (or a report
that can never succeed) ended the workflow with an error, and with it the node's findings
and its heartbeat watch: the node's next failure went unnoticed until the agent's next
signal started a fresh, empty workflow. Now the report is retried without a maximum (with
backoff), and a failure that cannot be retried leaves the workflow watching, state intact.

Real Temporal dev server; the report activity under its real name, failing on purpose.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from resurrect.config import AgentSettings
from resurrect.contracts import Evidence, FaultClass, SignalKind
from resurrect.contracts.node_health import (
    HEALTH_QUERY,
    REPORT_NODE_FAULT_ACTIVITY,
    NodeFaultReport,
    NodeFaultResult,
    NodeFindings,
    NodeHealth,
    NodeHeartbeat,
)
from resurrect.sensors.node_agent.reporters import TemporalReporter
from resurrect.workflows.node_health import REPORT_RETRY, NodeHealthWorkflow

pytestmark = pytest.mark.temporal


class FlakyReport:
    """Fails the first ``fail_times`` calls (``permanent``: not retryable), then succeeds."""

    def __init__(self, fail_times: int, *, permanent: bool) -> None:
        self.fail_times = fail_times
        self.permanent = permanent
        self.calls: list[str] = []

    @activity.defn(name=REPORT_NODE_FAULT_ACTIVITY)
    async def report(self, report: NodeFaultReport) -> NodeFaultResult:
        self.calls.append(report.reason)
        if len(self.calls) <= self.fail_times:
            raise ApplicationError("slurmctld unreachable", non_retryable=self.permanent)
        return NodeFaultResult(node=report.node, reported=[f"recover/x/{len(self.calls)}/0"])


def xid(node: str, gpu: str) -> NodeFindings:
    """The agent's findings: GPU ``gpu`` of ``node`` fell off the bus."""
    evidence = Evidence(
        kind=SignalKind.GPU_EVENT,
        text=f"NVRM: Xid (PCI:0000:4{gpu}:00): 79, reported by NVML",
        rule="xid.fallen_off_bus",
        role="root",
        fault_class=FaultClass.GPU_HARDWARE,
        host=node,
        gpu=gpu,
        observed_at=datetime.now(UTC),
    )
    return NodeFindings(node=node, sent_at=datetime.now(UTC), evidence=[evidence])


async def wait_calls(flaky: FlakyReport, count: int, timeout: float = 30) -> None:
    for _ in range(int(timeout * 20)):
        if len(flaky.calls) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{len(flaky.calls)} report calls, wanted {count}")


@asynccontextmanager
async def faulty_node(
    client: Client, node: str, gpu: str, flaky: FlakyReport
) -> AsyncIterator[TemporalReporter]:
    """``node``'s agent has sent a heartbeat and an Xid on ``gpu``; its NodeHealthWorkflow
    runs on a worker whose report activity is ``flaky``."""
    queue = f"nh-{uuid.uuid4().hex}"
    agent = TemporalReporter(
        client,
        cluster=f"s{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        settings=AgentSettings.model_validate({"node_name": node, "silence_threshold_s": 60}),
    )
    async with Worker(
        client, task_queue=queue, workflows=[NodeHealthWorkflow], activities=[flaky.report]
    ):
        await agent.heartbeat(
            NodeHeartbeat(
                node=node, seq=0, sent_at=datetime.now(UTC), gpus=8, silence_threshold_s=60
            )
        )
        await agent.findings(xid(node, gpu))
        yield agent


def test_the_report_is_retried_without_a_maximum() -> None:
    assert REPORT_RETRY.maximum_attempts == 0
    assert REPORT_RETRY.backoff_coefficient > 1 and REPORT_RETRY.maximum_interval is not None


async def test_a_report_that_cannot_succeed_leaves_the_node_watched(
    temporal_client: Client,
) -> None:
    flaky = FlakyReport(1, permanent=True)
    async with faulty_node(temporal_client, "gpu-f", "3", flaky) as agent:
        await wait_calls(flaky, 1)
        await asyncio.sleep(0.5)
        handle = temporal_client.get_workflow_handle(agent.workflow_id)
        description = await handle.describe()
        assert description.status is WorkflowExecutionStatus.RUNNING
        kept = await handle.query(HEALTH_QUERY, result_type=NodeHealth)
        assert kept.status == "faulty" and [e.gpu for e in kept.findings] == ["3"]
        # the next fault on the node is still reported, by the same workflow
        await agent.findings(xid("gpu-f", "5"))
        await wait_calls(flaky, 2)
        await asyncio.sleep(0.5)
        after = await handle.query(HEALTH_QUERY, result_type=NodeHealth)
    assert after.faults_reported == 1 and sorted(e.gpu or "" for e in after.findings) == ["3", "5"]
    assert (await handle.describe()).run_id == description.run_id


async def test_transient_report_failures_are_retried_until_they_pass(
    temporal_client: Client,
) -> None:
    flaky = FlakyReport(3, permanent=False)
    async with faulty_node(temporal_client, "gpu-t", "2", flaky) as agent:
        await wait_calls(flaky, 4, timeout=30)
        await asyncio.sleep(0.5)
        health = await temporal_client.get_workflow_handle(agent.workflow_id).query(
            HEALTH_QUERY, result_type=NodeHealth
        )
    assert health.faults_reported == 1 and health.reported_jobs == ["recover/x/4/0"]
