"""VerifiedScheduler's check -> act -> verify, over the in-memory primitives of FakeScheduler.

The same code runs over Slurm's CLI and pyslurm (tests/scheduler/test_slurm_cluster.py
checks it against real Slurm); here each race and refusal is staged exactly.
"""

from __future__ import annotations

import pytest

from resurrect.contracts import JobInfo, JobState
from resurrect.errors import (
    JobCompleting,
    NodeNotFound,
    NodeNotRegistered,
    SchedulerRefused,
)
from resurrect.testing import FakeScheduler


def running_job(job_id: str = "7", **update: object) -> JobInfo:
    job = JobInfo(
        job_id=job_id, state=JobState.RUNNING, user="alice", nodes=["node1", "node2"], num_nodes=2
    )
    return job.model_copy(update=update)


async def test_drain_is_done_once_and_verified() -> None:
    s = FakeScheduler.with_nodes(3)
    first = await s.drain_node("node1", "xid 79")
    again = await s.drain_node("node1", "xid 79")
    assert first.changed and first.detail == "resurrect: xid 79"
    assert not again.changed and "already drained by resurrect" in again.detail
    assert s.calls == [("drain", "node1")]


async def test_an_operators_drain_is_never_resumed() -> None:
    s = FakeScheduler.with_nodes(2)
    s.nodes["node1"] = s.nodes["node1"].model_copy(
        update={"flags": ["DRAIN"], "reason": "bad fan (ops)"}
    )
    assert not (await s.drain_node("node1", "xid 79")).changed
    with pytest.raises(SchedulerRefused):
        await s.resume_node("node1")
    assert s.calls == [] and s.nodes["node1"].reason == "bad fan (ops)"


def drained_by_resurrect(s: FakeScheduler, node: str, state: str) -> None:
    s.nodes[node] = s.nodes[node].model_copy(
        update={"state": state, "flags": ["DRAIN"], "reason": "resurrect: node.lost job 7"}
    )


async def test_a_node_not_registered_since_slurmctld_started_is_resumed_only_later() -> None:
    """Right after slurmctld restarts, a node is UNKNOWN until its slurmd registers; Slurm
    22.05 clears the drain of such a node on a resume and still answers "Invalid node
    state specified", so resurrect waits (a retryable error) instead of resuming."""
    s = FakeScheduler.with_nodes(2)
    drained_by_resurrect(s, "node1", "UNKNOWN")
    with pytest.raises(NodeNotRegistered):
        await s.resume_node("node1")
    assert s.calls == [] and s.nodes["node1"].drained
    drained_by_resurrect(s, "node1", "IDLE")
    assert (await s.resume_node("node1")).changed
    assert s.calls == [("resume", "node1")] and not s.nodes["node1"].drained


class RefusesAfterResuming(FakeScheduler):
    """Resumes the node, then answers as Slurm 22.05 does for a node whose state it lost."""

    async def _act_resume(self, node: str) -> None:
        await super()._act_resume(node)
        raise SchedulerRefused("scontrol update: rc=1: Invalid node state specified")


async def test_a_refused_resume_that_took_effect_is_reported_as_done() -> None:
    s = RefusesAfterResuming.with_nodes(2)
    drained_by_resurrect(s, "node1", "IDLE")
    result = await s.resume_node("node1")
    assert result.changed and not s.nodes["node1"].drained
    assert "Invalid node state specified but the node is no longer drained" in result.detail


class RefusesToResume(FakeScheduler):
    async def _act_resume(self, node: str) -> None:
        raise SchedulerRefused("scontrol update: rc=1: Invalid node state specified")


async def test_a_refused_resume_that_left_the_node_drained_stays_refused() -> None:
    s = RefusesToResume.with_nodes(2)
    drained_by_resurrect(s, "node1", "IDLE")
    with pytest.raises(SchedulerRefused):
        await s.resume_node("node1")
    assert s.nodes["node1"].drained


async def test_requeue_of_a_running_job_ends_the_attempt_keeps_id_and_owner() -> None:
    s = FakeScheduler.with_nodes(4)
    s.jobs["7"] = running_job()
    result = await s.requeue_excluding("7", ["node2"])
    assert result.changed and result.detail.startswith("requeuehold (RUNNING) -> exclude")
    assert s.calls == [("requeuehold", "7"), ("exclude", "7"), ("release", "7")]
    job = s.jobs["7"]
    assert (job.job_id, job.user, job.restart_count) == ("7", "alice", 1)
    assert job.state is JobState.RUNNING and "node2" not in job.nodes


async def test_requeue_awaits_before_release_while_the_job_is_held() -> None:
    """The fencing wait runs between the hold and the release: no new attempt can start
    (and slurmctld cannot requeue it itself) while the old one may still run cut off."""
    s = FakeScheduler.with_nodes(4)
    s.jobs["7"] = running_job()
    seen: list[tuple[bool, list[tuple[str, str]]]] = []

    async def fencing_wait() -> None:
        seen.append((s.jobs["7"].held, list(s.calls)))

    await s.requeue_excluding("7", ["node2"], before_release=fencing_wait)
    assert seen == [(True, [("requeuehold", "7"), ("exclude", "7")])]
    assert s.calls[-1] == ("release", "7")


class RequeuedFirst(FakeScheduler):
    """slurmctld requeues the job itself right before our requeuehold (which Slurm then
    refuses: "Job is pending execution"); reads may show the job's old state ``stale_reads``
    times more (seen right after slurmctld came back up)."""

    stale_reads = 0
    lag = 0

    async def _act_requeuehold(self, job_id: str) -> None:
        job = self.jobs[job_id]
        self.jobs[job_id] = job.model_copy(
            update={"state": JobState.PENDING, "restart_count": job.restart_count + 1}
        )
        self.stale_reads = self.lag
        await super()._act_requeuehold(job_id)

    async def get_job(self, job_id: str) -> JobInfo:
        job = await super().get_job(job_id)
        if self.stale_reads:
            self.stale_reads -= 1
            return job.model_copy(update={"state": JobState.COMPLETING})
        return job


@pytest.mark.parametrize("lag", [0, 2], ids=["pending at once", "old state read twice more"])
async def test_requeue_of_a_job_slurmctld_just_requeued_holds_it_once_pending(lag: int) -> None:
    """Our read saw the job NODE_FAIL; before our requeuehold slurmctld requeued it itself:
    Slurm answers "Job is pending execution" (JobAlreadyPending) and the job is held once it
    reads pending."""
    s = RequeuedFirst.with_nodes(4, start_requeued_jobs=False)
    s.lag = lag
    s.jobs["7"] = running_job(state=JobState.NODE_FAIL)
    result = await s.requeue_excluding("7", ["node1"])
    assert "hold (slurmctld had requeued it)" in result.detail
    assert s.calls == [("hold", "7"), ("exclude", "7"), ("release", "7")]
    assert s.jobs["7"].state is JobState.PENDING and s.jobs["7"].excluded_nodes == ["node1"]


async def test_requeuehold_is_retried_while_the_job_is_completing() -> None:
    class Completing(FakeScheduler):
        refusals = 2

        async def _act_requeuehold(self, job_id: str) -> None:
            if self.refusals:
                self.refusals -= 1
                raise JobCompleting("Job is still completing")
            await super()._act_requeuehold(job_id)

    s = Completing.with_nodes(4)
    s.jobs["7"] = running_job(state=JobState.FAILED)
    assert (await s.requeue_excluding("7", [])).changed
    assert s.refusals == 0 and s.calls[0] == ("requeuehold", "7")


async def test_a_pending_job_already_excluding_the_nodes_is_left_alone() -> None:
    s = FakeScheduler.with_nodes(4)
    s.jobs["7"] = running_job(state=JobState.PENDING, nodes=[], excluded_nodes=["node1"])
    result = await s.requeue_excluding("7", ["node1"])
    assert not result.changed and s.calls == []


async def test_requeue_refusals() -> None:
    s = FakeScheduler.with_nodes(2)
    s.jobs["7"] = running_job(requeue_allowed=False)
    with pytest.raises(SchedulerRefused):
        await s.requeue_excluding("7", [])
    s.jobs["8"] = running_job("8")
    with pytest.raises(NodeNotFound):
        await s.requeue_excluding("8", ["node9"])
    assert s.calls == []


async def test_cancel_is_done_once() -> None:
    s = FakeScheduler.with_nodes(2)
    s.jobs["7"] = running_job()
    assert (await s.cancel_job("7")).changed
    assert not (await s.cancel_job("7")).changed
    assert s.calls == [("cancel", "7")] and s.jobs["7"].state is JobState.CANCELLED


async def test_a_fencing_wait_cut_short_leaves_the_job_held_and_marked_until_its_deadline() -> None:
    """The activity running the wait is cancelled (timed out, its worker lost): the job is
    not released before the fencing deadline - a retry (or the watchdog past its bound)
    releases it - and it carries resurrect's hold mark for that."""
    import asyncio
    import time

    from resurrect.scheduler.hold_marker import has_marker

    s = FakeScheduler.with_nodes(4)
    s.jobs["7"] = running_job()
    held = asyncio.Event()

    async def fencing_wait() -> None:
        held.set()
        await asyncio.sleep(60)

    task = asyncio.create_task(
        s.requeue_excluding(
            "7", ["node2"], before_release=fencing_wait, release_not_before=time.time() + 60
        )
    )
    await held.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ("release", "7") not in s.calls
    assert s.jobs["7"].held and has_marker(s.jobs["7"].admin_comment)


async def test_a_wait_that_fails_after_its_deadline_releases_the_job_fail_open() -> None:
    import time

    s = FakeScheduler.with_nodes(4)
    s.jobs["7"] = running_job()

    async def broken_wait() -> None:
        raise RuntimeError("lost the worker")

    with pytest.raises(RuntimeError):
        await s.requeue_excluding(
            "7", ["node2"], before_release=broken_wait, release_not_before=time.time() - 1
        )
    assert s.calls[-1] == ("release", "7") and not s.jobs["7"].held


async def test_a_job_already_pending_with_its_exclusion_is_still_held_for_a_wait() -> None:
    """slurmctld requeued it itself (with the exclusion already in place): with a wait to
    await, it is held through the wait, never left to start."""
    s = FakeScheduler.with_nodes(4)
    s.jobs["7"] = running_job(
        state=JobState.PENDING, restart_count=1, nodes=[], excluded_nodes=["node2"]
    )
    seen: list[bool] = []

    async def fencing_wait() -> None:
        seen.append(s.jobs["7"].held)

    result = await s.requeue_excluding("7", ["node2"], before_release=fencing_wait)
    assert seen == [True] and result.changed
    assert s.calls == [("hold", "7"), ("release", "7")]
    # without a wait it is left as it is
    s.jobs["7"] = running_job(
        state=JobState.PENDING, restart_count=1, nodes=[], excluded_nodes=["node2"]
    )
    s.calls.clear()
    assert not (await s.requeue_excluding("7", ["node2"])).changed and s.calls == []
