"""A node the repair workflow returns to service is given back to the pending jobs resurrect
excluded it from: a job whose exclusions, with other nodes out, leave it fewer nodes than
it needs would otherwise wait for ever (the sixth host soak's job 98). Running, held and
gone jobs, and jobs that no longer exclude it, are left as they are."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from resurrect.activities.operator import OperatorActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState
from resurrect.operator.models import NodeRepairState
from resurrect.operator.repair_client import repair_timings
from resurrect.testing import FakeScheduler

T0 = datetime(2026, 12, 4, 16, 0, tzinfo=UTC)


def job(job_id: str, state: JobState, excluded: list[str], **extra: object) -> JobInfo:
    return JobInfo(job_id=job_id, state=state, num_nodes=2, excluded_nodes=excluded, **extra)


async def test_a_returned_node_is_given_back_to_the_pending_jobs_it_was_kept_off() -> None:
    scheduler = FakeScheduler.with_nodes(4)
    await scheduler.drain_node("node3", "resurrect: node.lost job 98 [recover/c/98/2]")
    scheduler.jobs.update(
        {
            "98": job("98", JobState.PENDING, ["node3", "node4"]),
            "99": job("99", JobState.RUNNING, ["node3"], nodes=["node1", "node2"]),
            "100": job("100", JobState.PENDING, ["node3"], held=True),
            "101": job("101", JobState.PENDING, ["node4"]),
        }
    )
    recorded = {
        job_id: T0 + timedelta(seconds=i)
        for i, job_id in enumerate(["98", "99", "100", "101", "102"])
    }

    async def repair_state(node: str) -> NodeRepairState:
        return NodeRepairState(
            cluster="c", node=node, timings=repair_timings(ResurrectConfig()), exclusions=recorded
        )

    activities = OperatorActivities(scheduler, ResurrectConfig(), repair_state=repair_state)
    detail = await ActivityEnvironment().run(activities.resume_node, "node3")
    assert not scheduler.nodes["node3"].drained
    assert "no longer excluded from pending job(s) 98" in detail
    assert scheduler.jobs["98"].excluded_nodes == ["node4"]
    assert scheduler.jobs["98"].state is JobState.PENDING and not scheduler.jobs["98"].held
    assert [call for call in scheduler.calls if call[1] == "98"] == [("exclude", "98")]
    assert scheduler.jobs["99"].excluded_nodes == ["node3"]
    assert scheduler.jobs["100"].excluded_nodes == ["node3"] and scheduler.jobs["100"].held
    assert scheduler.jobs["101"].excluded_nodes == ["node4"]


async def test_a_resume_refused_gives_nothing_back() -> None:
    scheduler = FakeScheduler.with_nodes(2)
    drained = scheduler.nodes["node1"]
    scheduler.nodes["node1"] = drained.model_copy(
        update={"flags": [*drained.flags, "DRAIN"], "reason": "maintenance by an operator"}
    )
    scheduler.jobs["7"] = job("7", JobState.PENDING, ["node1"])
    asked: list[str] = []

    async def repair_state(node: str) -> NodeRepairState:
        asked.append(node)
        return NodeRepairState(
            cluster="c", node=node, timings=repair_timings(ResurrectConfig()), exclusions={"7": T0}
        )

    activities = OperatorActivities(scheduler, ResurrectConfig(), repair_state=repair_state)
    with pytest.raises(ApplicationError):
        await ActivityEnvironment().run(activities.resume_node, "node1")
    assert scheduler.jobs["7"].excluded_nodes == ["node1"] and asked == []


async def test_a_job_that_started_meanwhile_is_neither_held_nor_requeued() -> None:
    """The give-back edits a pending job's exclusion list and nothing else: a job Slurm
    started between the repair's read and its act keeps running."""
    scheduler = FakeScheduler.with_nodes(4)
    scheduler.jobs["98"] = job("98", JobState.RUNNING, ["node3"], nodes=["node1", "node2"])
    result = await scheduler.give_back_nodes("98", ["node3"])
    assert not result.changed
    assert scheduler.jobs["98"].state is JobState.RUNNING
    assert scheduler.jobs["98"].restart_count == 0 and scheduler.calls == []
