"""The requeue never lets a new attempt start before the failed attempt's nodes out of
contact have certainly fenced: not when slurmctld requeued the job itself, and not when the
activity that waits is cancelled or retried (its retry finds the recorded deadline and waits
out the rest). The deadline itself: tests/activities/test_fencing_wait.py."""

from __future__ import annotations

import time

import pytest

from resurrect.activities import steps
from resurrect.activities.steps import requeue_job
from resurrect.contracts import JobInfo, JobState, StepResult
from resurrect.sdk import FakeScheduler, make_step_input, run_step

FAILED = JobInfo(
    job_id="42", state=JobState.NODE_FAIL, user="alice", nodes=["node1", "node2"], num_nodes=2
)


class Timed(FakeScheduler):
    """Records when the job was released."""

    released_at: float | None = None

    async def _act_release(self, job_id: str) -> None:
        self.released_at = time.time()
        await super()._act_release(job_id)


def fence_by(monkeypatch: pytest.MonkeyPatch, deadline: float) -> None:
    """node2 is out of contact and has certainly fenced at epoch second ``deadline`` (what
    the node health workflow's recorded silence gives, the same for every attempt)."""

    async def recorded(ctx: object) -> tuple[float, list[str]]:
        return deadline, ["node2"]

    monkeypatch.setattr(steps, "_fence_deadline", recorded)


async def requeue_pending(
    monkeypatch: pytest.MonkeyPatch, *, held: bool
) -> tuple[Timed, float, StepResult]:
    """The requeue step of job 42's attempt 0, node2 fencing within a second, the job found
    pending as attempt 1 (``held``: by the first try of the step; else slurmctld's own)."""
    scheduler = Timed.with_nodes(4, cluster_name="test")
    scheduler.jobs["42"] = FAILED.model_copy(
        update={"state": JobState.PENDING, "restart_count": 1, "held": held, "nodes": [],
                "excluded_nodes": ["node2"]}
    )  # fmt: skip
    deadline = time.time() + 1.0
    fence_by(monkeypatch, deadline)
    step_input = make_step_input("recovery.requeue_job", job=FAILED)
    result = await run_step(requeue_job, scheduler=scheduler, step_input=step_input)
    return scheduler, deadline, result


async def test_a_job_slurmctld_requeued_itself_is_held_until_the_fence_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scheduler, deadline, result = await requeue_pending(monkeypatch, held=False)
    assert result.requeued
    assert [c for c, _ in scheduler.calls][:1] == ["hold"] and ("release", "42") in scheduler.calls
    assert scheduler.released_at is not None and scheduler.released_at >= deadline
    assert any("to have fenced the old attempt" in n for n in result.notes)


async def test_a_retry_after_a_cancelled_wait_waits_out_the_rest_then_releases(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first attempt held the job (requeuehold: restart 1, held, marked) and was
    cancelled mid-wait; the retry finds it held and releases it only at the deadline."""
    scheduler, deadline, result = await requeue_pending(monkeypatch, held=True)
    assert result.requeued and ("release", "42") in scheduler.calls
    assert scheduler.released_at is not None and scheduler.released_at >= deadline


async def test_a_rerun_slurmctld_started_before_the_fence_is_noted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scheduler = FakeScheduler.with_nodes(4, cluster_name="test")
    scheduler.jobs["42"] = FAILED.model_copy(
        update={"state": JobState.RUNNING, "restart_count": 1, "nodes": ["node1", "node3"]}
    )
    fence_by(monkeypatch, time.time() + 30)
    step_input = make_step_input("recovery.requeue_job", job=FAILED)
    result = await run_step(requeue_job, scheduler=scheduler, step_input=step_input)
    assert result.requeued and "already requeued" in result.detail and scheduler.calls == []
    assert any("started again by slurmctld" in n for n in result.notes)
