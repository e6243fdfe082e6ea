"""Restart loops (decide.py rules 9 and 10), as specifications.

Each recovery records the last step its attempt printed and the checkpoint the next attempt
resumed from. A job whose last ``no_progress_restarts`` restarts all made no progress is
stopped, whatever the fault; free restarts are capped per window.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from resurrect.contracts import (
    DEFAULT_ACTION,
    AttemptRecord,
    Diagnosis,
    Evidence,
    FaultClass,
    JobInfo,
    JobPolicy,
    JobState,
    RecoveryAction,
    RestartHistory,
    SignalKind,
)
from resurrect.plans.decide import Choice, decide, made_progress, restart_loop
from resurrect.plans.loader import load_plans
from resurrect.testing.steps import make_step_input

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
NODE_LOSS = Diagnosis(
    fault_class=FaultClass.NODE_LOST,
    action=DEFAULT_ACTION[FaultClass.NODE_LOST],
    confidence=0.9,
    culprit_hosts=["gpu-2"],
    evidence=[
        Evidence(
            kind=SignalKind.SCHEDULER_STATE,
            text="node gpu-2 DOWN",
            role="root",
            fault_class=FaultClass.NODE_LOST,
            host="gpu-2",
            source="scheduler",
        )
    ],
)


def attempt(n: int, last: int | None, resumed: int | None = None, **extra: object) -> AttemptRecord:
    return AttemptRecord.model_validate(
        {
            "restart_count": n,
            "requeued": True,
            "last_step": last,
            "resume_step": resumed,
            "closed_at": NOW - timedelta(minutes=10 * (10 - n)),
            **extra,
        }
    )


def history(*earlier: AttemptRecord, last: int | None) -> RestartHistory:
    return RestartHistory(last_step=last, earlier=list(earlier), read_at=NOW)


def recover(past: RestartHistory, policy: JobPolicy | None = None) -> Choice:
    """The decision for the job's node loss at attempt ``len(past.earlier)``."""
    job = JobInfo(
        job_id="7",
        state=JobState.NODE_FAIL,
        nodes=["gpu-1", "gpu-2"],
        restart_count=len(past.earlier),
    )
    bundle = make_step_input("recovery.requeue_job", job=job).bundle
    interruption = bundle.interruption.model_copy(update={"restart_count": len(past.earlier)})
    bundle = bundle.model_copy(
        update={"policy": policy or JobPolicy(), "interruption": interruption}
    )
    return decide(bundle, NODE_LOSS, load_plans(), 0, history=past)


def test_a_job_that_dies_before_its_first_checkpoint_each_time_stops_after_three_restarts() -> None:
    looping = [attempt(0, 5), attempt(1, 4)]
    assert recover(history(*looping, last=5)).decision.requeue  # two restarts so far
    stop = recover(history(*looping, attempt(2, 5), last=3))  # the third
    assert stop.decision.action is RecoveryAction.STOP and not stop.decision.requeue
    assert stop.plan is not None and stop.plan.name == "stop-and-notify"
    [loop] = [r for r in stop.decision.reasons if r.startswith("restart loop")]
    assert "attempt 0: last step 5" in loop and "attempt 3: last step 3" in loop


def test_an_attempt_that_gets_further_or_checkpoints_newer_is_progress() -> None:
    assert made_progress(attempt(2, 120), [attempt(1, 100, resumed=50)])
    assert made_progress(attempt(2, 90, resumed=80), [attempt(1, 100, resumed=50)])
    assert made_progress(attempt(2, 99), [attempt(0, 100), attempt(1, 90)]) is False
    assert made_progress(attempt(2, None), [attempt(1, 100)]) is None  # nothing known
    moving = [attempt(0, 100), attempt(1, 200), attempt(2, 300), attempt(3, 400)]
    assert recover(history(*moving, last=500)).decision.requeue


def test_faults_faster_than_the_checkpoint_interval_are_a_loop_too() -> None:
    # every attempt resumes from step 50 and dies before its next save, near step 100
    stuck = [attempt(0, 100, 50), attempt(1, 90, 50), attempt(2, 98, 50), attempt(3, 95, 50)]
    assert recover(history(*stuck, last=97)).decision.action is RecoveryAction.STOP


def test_what_is_not_known_never_stops_a_job() -> None:
    silent = [attempt(0, None), attempt(1, None), attempt(2, None), attempt(3, None)]
    assert recover(history(*silent, last=None)).decision.requeue
    gap = [attempt(0, 5), attempt(2, 5), attempt(3, 5)]  # attempt 1 was never recorded
    assert restart_loop(history(*gap, last=5), 4, JobPolicy()) is None


def test_a_comment_may_stop_a_loop_sooner() -> None:
    policy = JobPolicy(no_progress_restarts=1)
    assert recover(history(attempt(0, 5), last=5), policy).decision.action is RecoveryAction.STOP


def test_free_restarts_beyond_the_cap_are_charged() -> None:
    # progress every time (no loop), ten free restarts in the last day
    free = [attempt(n, 100 * (n + 1)) for n in range(10)]
    capped = recover(history(*free, last=2000))
    assert capped.decision.requeue and capped.decision.counts_against_budget
    assert any("10 free restarts within the last 86400 s" in r for r in capped.decision.reasons)
    charged = [attempt(n, 100 * (n + 1), charged=True) for n in range(10)]
    assert not recover(history(*charged, last=2000)).decision.counts_against_budget
    old = [a.model_copy(update={"closed_at": NOW - timedelta(days=2)}) for a in free]
    assert not recover(history(*old, last=2000)).decision.counts_against_budget


def verified(*earlier: AttemptRecord, last: int | None, step: int | None = None) -> RestartHistory:
    """What the assessment records: progress from verified checkpoints only, the job's
    free restarts over its life."""
    return RestartHistory(
        last_step=last,
        earlier=list(earlier),
        read_at=NOW,
        progress_from_checkpoints=True,
        verified_step=step,
        free_restarts=sum(1 for a in earlier if a.requeued and not a.charged),
    )


def test_printing_one_more_fake_step_per_attempt_does_not_escape_the_loop() -> None:
    # each attempt prints a step past the last, but never saves a newer checkpoint than 50
    faking = [attempt(n, 100 + n, resumed=50) for n in range(3)]
    assert recover(history(*faking, last=103)).decision.requeue  # printed steps: "progress"
    stop = recover(verified(*faking, last=103))
    assert stop.decision.action is RecoveryAction.STOP


def test_a_newer_checkpoint_that_verified_is_progress() -> None:
    saving = [attempt(0, 100, resumed=50), attempt(1, 101, resumed=50), attempt(2, 102, 50)]
    assert recover(verified(*saving, last=103, step=60)).decision.requeue  # this attempt saved
    moving = [attempt(0, 0, 100), attempt(1, 0, 200), attempt(2, 0, 300), attempt(3, 0, 400)]
    assert recover(verified(*moving, last=None)).decision.requeue


def test_free_restarts_spaced_past_the_window_are_capped_over_the_jobs_life() -> None:
    # a free restart every 2.4 h never fills the daily window; the lifetime cap charges
    spaced = [
        attempt(n, 0, 10 * (n + 1), closed_at=NOW - timedelta(hours=2.4 * (60 - n)))
        for n in range(60)
    ]
    capped = recover(verified(*spaced, last=None), JobPolicy(max_free_restarts=30))
    assert capped.decision.requeue and capped.decision.counts_against_budget
    assert any("60 free restarts in the job's life" in r for r in capped.decision.reasons)
    under = recover(verified(*spaced[:5], last=None), JobPolicy(max_free_restarts=30))
    assert not under.decision.counts_against_budget


def test_a_comment_may_lower_the_lifetime_cap_but_not_raise_it() -> None:
    from resurrect.config import ResurrectConfig
    from resurrect.policy import job_policy

    config = ResurrectConfig.model_validate({"cluster": {"name": "c"}})
    for asked, granted in ((5, 5), (10**4, JobPolicy().max_free_restarts)):
        job = JobInfo(
            job_id="7",
            state=JobState.RUNNING,
            comment=f'{{"resurrect": {{"max_free_restarts": {asked}}}}}',
        )
        policy = job_policy(job, config)
        assert policy is not None and policy.max_free_restarts == granted
