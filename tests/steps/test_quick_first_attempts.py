"""Quick steps and ``recovery.assess`` are tried first as local activities of ``quick_s``
seconds: what they do with those seconds, and that they say NeedsMoreTime (never a weaker
result) when the seconds are not enough, so the recovery runs them again as activity tasks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from resurrect.activities.recovery import RecoveryActivities
from resurrect.activities.steps import wait_running
from resurrect.checkpoint.as_owner import run_helper
from resurrect.checkpoint.helper import HelperRequest
from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobPolicy, JobState, RecoveryState, StepInput
from resurrect.contracts.assessment import AssessRequest
from resurrect.errors import NeedsMoreTime
from resurrect.rules.engine import default_engine
from resurrect.testing import FakeScheduler
from resurrect.testing.steps import make_step_input, run_step


def assert_needs_more_time(failure: ApplicationError, message: str) -> None:
    """Retryable (the recovery runs the call again as an activity task), and benign: the SDK
    logs it at debug level, without a traceback, and counts no failure."""
    assert failure.type == NeedsMoreTime.__name__ and failure.message == message
    assert not failure.non_retryable
    assert failure.category is ApplicationErrorCategory.BENIGN


def waiting_for(
    job_state: JobState, quick_s: float | None, **params: float
) -> tuple[FakeScheduler, StepInput]:
    """Job 42, requeued without node2 (a free restart), now ``job_state`` on node1 and
    node3."""
    scheduler = FakeScheduler.with_nodes(4, cluster_name="test")
    step_input = make_step_input(
        "recovery.wait_running",
        {"poll_interval_s": 0.05, **params},
        state=RecoveryState(requeued=True, excluded_nodes=["node2"]),
    )
    scheduler.jobs["42"] = step_input.bundle.job.model_copy(
        update={"state": job_state, "nodes": ["node1", "node3"]}
    )
    free = step_input.decision.model_copy(update={"counts_against_budget": False})
    return scheduler, step_input.model_copy(update={"quick_s": quick_s, "decision": free})


async def test_a_first_attempt_at_waiting_gives_up_after_its_seconds() -> None:
    scheduler, step_input = waiting_for(JobState.PENDING, quick_s=0.2)
    with pytest.raises(ApplicationError) as raised:
        await run_step(wait_running, scheduler=scheduler, step_input=step_input)
    assert_needs_more_time(raised.value, "job 42 still PENDING")


async def test_a_first_attempt_at_waiting_returns_a_job_that_runs_within_them() -> None:
    scheduler, step_input = waiting_for(JobState.RUNNING, quick_s=0.2)
    result = await run_step(wait_running, scheduler=scheduler, step_input=step_input)
    assert result.running_again and result.detail == "job 42 RUNNING on node1,node3"


def charged(step_input: StepInput) -> StepInput:
    """The recovery charged its requeue to the job's restart budget."""
    decision = step_input.decision.model_copy(update={"counts_against_budget": True})
    return step_input.model_copy(update={"decision": decision})


async def test_a_first_attempt_after_a_charged_restart_gives_way_at_the_first_read() -> None:
    """The charge is published when the recovery waits for an activity task: waiting here
    would hide it from the recovery of a next attempt that fails in the meantime."""
    scheduler, step_input = waiting_for(JobState.PENDING, quick_s=30)
    reads = 0

    async def counted_get_job(job_id: str) -> JobInfo:
        nonlocal reads
        reads += 1
        return await FakeScheduler.get_job(scheduler, job_id)

    scheduler.get_job = counted_get_job  # type: ignore[method-assign]
    with pytest.raises(ApplicationError) as raised:
        await run_step(wait_running, scheduler=scheduler, step_input=charged(step_input))
    assert_needs_more_time(raised.value, "job 42 still PENDING; restart charged")
    assert reads == 1


async def test_a_charged_restart_already_running_is_waited_for_no_longer() -> None:
    scheduler, step_input = waiting_for(JobState.RUNNING, quick_s=30)
    result = await run_step(wait_running, scheduler=scheduler, step_input=charged(step_input))
    assert result.running_again


async def test_the_task_attempt_after_a_charged_restart_waits_as_any_other() -> None:
    scheduler, step_input = waiting_for(JobState.PENDING, quick_s=None, timeout_s=0.3)
    result = await run_step(wait_running, scheduler=scheduler, step_input=charged(step_input))
    assert not result.running_again and "not running after" in result.detail


async def test_the_task_attempt_keeps_waiting_for_its_whole_timeout() -> None:
    scheduler, step_input = waiting_for(JobState.PENDING, quick_s=None, timeout_s=0.3)
    result = await run_step(wait_running, scheduler=scheduler, step_input=step_input)
    assert not result.running_again and "not running after" in result.detail


async def test_a_checkpoint_helper_cut_short_says_needs_more_time(tmp_path: Path) -> None:
    """Never an unverified (or less verified) verdict from a first attempt: the task attempt
    verifies with the whole time."""
    (tmp_path / "step_10").mkdir()
    request = HelperRequest(
        op="prepare",
        root=str(tmp_path),
        level="full",
        act=False,
        owner_uid=os.getuid(),
        owner_gid=os.getgid(),
    )
    with pytest.raises(NeedsMoreTime):
        await run_helper(request, timeout_s=60, quick_s=0.001)
    verdict = await run_helper(request, timeout_s=60, quick_s=30)
    assert verdict.root == str(tmp_path)


def assess_request(tmp_path: Path, quick_s: float | None) -> AssessRequest:
    log = tmp_path / "train.out"
    log.write_text("Traceback (most recent call last):\nKeyError: 'labels'\n")
    step_input = make_step_input("recovery.assess")
    job = step_input.bundle.job.model_copy(
        update={"stdout_path": str(log), "user_id": os.getuid(), "state": JobState.FAILED}
    )
    bundle = step_input.bundle.model_copy(update={"job": job, "policy": JobPolicy()})
    return AssessRequest(bundle=bundle, workflow_id="recover/test/42/0", quick_s=quick_s)


async def test_assess_answers_within_its_seconds_as_it_would_with_all_its_time(
    tmp_path: Path,
) -> None:
    activities = RecoveryActivities(
        FakeScheduler(cluster_name="test"), ResurrectConfig(), default_engine()
    )
    quick = await activities.assess(assess_request(tmp_path, quick_s=10))
    full = await activities.assess(assess_request(tmp_path, quick_s=None))
    assert quick.history.read_at is not None and full.history.read_at is not None
    unread = {"read_at": None}
    assert quick.model_copy(
        update={"history": quick.history.model_copy(update=unread)}
    ) == full.model_copy(update={"history": full.history.model_copy(update=unread)})
    assert quick.diagnosis.fault_class.value == "app.error"


async def test_assess_needs_more_time_when_it_cannot_answer_within_its_seconds(
    tmp_path: Path,
) -> None:
    activities = RecoveryActivities(
        FakeScheduler(cluster_name="test"), ResurrectConfig(), default_engine()
    )
    with pytest.raises(ApplicationError) as raised:
        await activities.assess(assess_request(tmp_path, quick_s=0))
    assert_needs_more_time(raised.value, "not assessed within 0 s")
