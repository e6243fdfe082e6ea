"""``recovery.wait_running`` reads the job's checkpoint advice once per recovery run and job
attempt: the step run again (a quick attempt given up, an activity retried) gives the same
note without reading the job's recoveries again."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.client import Client

from resurrect.activities import steps
from resurrect.config import ResurrectConfig
from resurrect.contracts import JobState, RecoveryState
from resurrect.steps.runtime import StepRuntime, make_activity
from resurrect.testing import FakeScheduler
from resurrect.testing.steps import make_step_input, step_environment


async def test_the_advice_is_read_once_per_run_and_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[str] = []

    async def advice(*args: Any, **kwargs: Any) -> str:
        job = args[3]
        reads.append(job.job_id)
        return f"checkpoint advice: advice #{len(reads)}"

    monkeypatch.setattr(steps, "advice_note", advice)
    scheduler = FakeScheduler.with_nodes(4, cluster_name="test")
    step_input = make_step_input(
        "recovery.wait_running", {"poll_interval_s": 0.01}, state=RecoveryState(requeued=True)
    )
    job = step_input.bundle.job.model_copy(update={"state": JobState.RUNNING})
    scheduler.jobs[job.job_id] = job
    runtime = StepRuntime(
        scheduler=scheduler,
        config=ResurrectConfig(),
        client=Client.__new__(Client),  # present; the advice read is replaced above
    )
    activity = make_activity(steps.wait_running, runtime, activity_name="recovery.wait_running")

    run = str(uuid.uuid4())
    first = await step_environment(run).run(activity, step_input)
    again = await step_environment(run).run(activity, step_input)
    assert first.notes == again.notes == ["checkpoint advice: advice #1"]
    assert reads == [job.job_id]
    other_run = await step_environment().run(activity, step_input)
    assert other_run.notes == ["checkpoint advice: advice #2"]  # another recovery reads
