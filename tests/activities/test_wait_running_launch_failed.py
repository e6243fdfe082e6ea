"""``recovery.wait_running`` on a restart whose launch failed: slurmctld requeued and held
the job itself (``launch failed requeued held``). Waiting longer changes nothing (the hold is
Slurm's, and the Slurm watcher reports the new interruption whose recovery releases it), so
the step ends at once and says why."""

from __future__ import annotations

from resurrect.activities.steps import wait_running
from resurrect.contracts import JobState, RecoveryState, StepResult
from resurrect.testing import FakeScheduler
from resurrect.testing.steps import make_step_input, run_step


async def wait_on(timeout_s: float, **job: object) -> StepResult:
    """recovery.wait_running after a requeue, the job as ``job`` says at every read."""
    scheduler = FakeScheduler()
    step_input = make_step_input(
        "recovery.wait_running",
        {"poll_interval_s": 0.01, "timeout_s": timeout_s},
        state=RecoveryState(requeued=True, excluded_nodes=["node2"]),
    )
    scheduler.jobs["42"] = step_input.bundle.job.model_copy(update=job)
    return await run_step(wait_running, scheduler=scheduler, step_input=step_input)


async def test_a_restart_slurm_held_after_its_failed_launch_ends_the_wait_with_the_reason() -> None:
    result = await wait_on(
        30,
        state=JobState.COMPLETING,
        restart_count=2,
        held=True,
        state_reason="launch_failed_requeued_held",
        nodes=["node1"],
    )
    assert (result.ok, result.running_again) == (False, False)
    assert "failed to launch on node1" in result.detail
    assert "launch_failed_requeued_held" in result.detail


async def test_a_persons_hold_is_waited_out_as_before() -> None:
    result = await wait_on(
        0.05, state=JobState.PENDING, restart_count=1, held=True, state_reason="JobHeldAdmin"
    )
    assert result.running_again is False
    assert "not running after" in result.detail
