"""``node_health.report_node_fault`` alone, in an ActivityEnvironment with a fake scheduler."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support.builders import OPT_IN
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from resurrect.activities.node_health import NodeHealthActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts import FaultClass, Interruption, JobInfo, JobPolicy, JobState
from resurrect.contracts.node_health import NodeFaultReport
from resurrect.errors import SchedulerUnavailable
from resurrect.testing import FakeScheduler


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[Interruption, str]] = []

    async def __call__(self, client: Client, interruption: Interruption, *, task_queue: str) -> str:
        self.sent.append((interruption, task_queue))
        return interruption.workflow_id


def report(node: str = "n3") -> NodeFaultReport:
    return NodeFaultReport(
        cluster="c1",
        node=node,
        fault_class=FaultClass.NODE_LOST,
        reason="agent silent",
        observed_at=datetime(2026, 11, 29, 20, 0, tzinfo=UTC),
    )


def activities(jobs: list[JobInfo], recorder: Recorder, **config: object) -> NodeHealthActivities:
    return NodeHealthActivities(
        FakeScheduler(jobs=jobs),
        client=None,  # type: ignore[arg-type]  # only handed to the report function
        config=ResurrectConfig.model_validate({"temporal": {"task_queue": "q1"}, **config}),
        report=recorder,
    )


async def test_reports_running_opted_in_jobs_on_the_node_only() -> None:
    recorder = Recorder()
    jobs = [
        JobInfo(job_id="1", state=JobState.RUNNING, nodes=["n2", "n3"], comment=OPT_IN),
        JobInfo(job_id="2", state=JobState.RUNNING, nodes=["n3"]),
        JobInfo(job_id="3", state=JobState.PENDING, nodes=[], comment=OPT_IN),
        JobInfo(  # its attempt 1 ended by itself and is torn down
            job_id="4",
            state=JobState.COMPLETING,
            nodes=["n3"],
            comment=OPT_IN,
            restart_count=1,
            end_time=datetime(2026, 11, 29, 19, 59, tzinfo=UTC),
        ),
        JobInfo(job_id="5", state=JobState.RUNNING, nodes=["n30"], comment=OPT_IN),
    ]
    result = await ActivityEnvironment().run(activities(jobs, recorder).report_node_fault, report())
    assert result.jobs_on_node == ["1", "2", "4"]
    assert result.reported == ["recover/c1/1/0", "recover/c1/4/1"]
    assert result.skipped == ["job 2: not opted in"]
    first, queue = recorder.sent[0]
    assert queue == "q1"
    assert (first.source, first.suspect_nodes, first.fault_hint) == (
        "node_agent",
        ["n3"],
        FaultClass.NODE_LOST,
    )
    assert first.job_state is JobState.RUNNING and first.nodes == ["n2", "n3"]


async def test_a_fault_during_a_requeues_teardown_is_the_earlier_attempts() -> None:
    """Slurm requeued job 8 (Restarts 1) while its attempt 0 is still torn down on n3: the
    node's fault goes to attempt 0's recovery, never to the attempt that has not run."""
    recorder = Recorder()
    jobs = [
        JobInfo(
            job_id="8", state=JobState.COMPLETING, nodes=["n3"], comment=OPT_IN, restart_count=1
        )
    ]
    result = await ActivityEnvironment().run(activities(jobs, recorder).report_node_fault, report())
    assert result.reported == ["recover/c1/8/0"]
    assert recorder.sent[0][0].restart_count == 0


async def test_partition_default_opts_jobs_in() -> None:
    recorder = Recorder()
    jobs = [JobInfo(job_id="7", state=JobState.RUNNING, nodes=["n3"], partition="gpu")]
    acts = activities(jobs, recorder, policy={"partitions": {"gpu": JobPolicy().model_dump()}})
    result = await ActivityEnvironment().run(acts.report_node_fault, report())
    assert result.reported == ["recover/c1/7/0"]


async def test_scheduler_unavailable_raises_for_temporal_to_retry() -> None:
    scheduler = FakeScheduler()
    scheduler.fail_next = 1
    acts = NodeHealthActivities(
        scheduler,
        client=None,  # type: ignore[arg-type]
        config=ResurrectConfig(),
        report=Recorder(),
    )
    with pytest.raises(SchedulerUnavailable):
        await ActivityEnvironment().run(acts.report_node_fault, report())
