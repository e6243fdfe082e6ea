"""Goodput accounting on constructed timelines: every second lands in exactly one part."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from resurrect.goodput.accounting import account_job, cluster_total, step_time, time_of_step
from resurrect.goodput.model import Attempt, JobRecord, ProgressMark, RecoveryRecord

T0 = datetime(2026, 11, 30, 6, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def marks(first_step: int, last_step: int, start_s: float, every: int = 1) -> list[ProgressMark]:
    """One step per second, the first step done at ``start_s``."""
    return [
        ProgressMark(step=step, at=at(start_s + (step - first_step)))
        for step in range(first_step, last_step + 1)
        if step == first_step or step % every == 0
    ]


def one_interruption(**recovery: object) -> JobRecord:
    """Submitted at -10 s, started at 0, first step at 5 s, steps 1..40 one a second (last at
    44 s), checkpoint at 30; node lost; recovery at 50 s, requeued at 53 s, attempt 1 starts at
    60 s, resumes from 30, first step (31) at 68 s, finishes step 60 at 97 s, ends at 100 s."""
    fields: dict[str, object] = {
        "workflow_id": "recover/c/7/0",
        "attempt": 0,
        "fault_class": "node.lost",
        "outcome": "recovered",
        "started_at": at(50),
        "first_observed_at": at(49),
        "requeued_at": at(53),
        "running_again_at": at(61),
        "closed_at": at(61.5),
        "resume_step": 30,
        "drained_nodes": ["node2"],
    }
    fields.update(recovery)
    return JobRecord(
        cluster="c",
        job_id="7",
        submitted_at=at(-10),
        ended_at=at(100),
        state="COMPLETED",
        current_attempt=1,
        attempts=[
            Attempt(index=0, started_at=at(0), marks=marks(1, 40, 5), resumed_step=0),
            Attempt(index=1, started_at=at(60), marks=marks(31, 60, 68), resumed_step=30),
        ],
        recoveries=[RecoveryRecord.model_validate(fields)],
    )


def seconds(report: object, part: str) -> float:
    return report.parts[part].seconds  # type: ignore[attr-defined,no-any-return]


def test_one_interruption_is_split_into_its_measured_parts() -> None:
    report = account_job(one_interruption(), now=at(1000))
    assert report.wall_s == 100
    assert seconds(report, "startup") == 5 + 8  # 0->5 and 60->68
    assert seconds(report, "productive") == 29 + 29  # step 1 (5 s) -> 30 (34 s); 31 (68) -> 60 (97)
    assert seconds(report, "recompute") == 10  # steps 31..40, redone: 34 -> 44 s
    assert seconds(report, "detection") == 6  # last progress at 44 s -> recovery at 50 s
    assert seconds(report, "recovery") == 3  # 50 -> requeued at 53
    assert seconds(report, "queue") == 7  # 53 -> running at 60
    assert seconds(report, "unattributed") == 3  # last step at 97 -> job end at 100
    assert sum(part.seconds for part in report.parts.values()) == pytest.approx(report.wall_s)
    assert all(part.basis == "measured" for part in report.parts.values())
    assert report.goodput == pytest.approx(58 / 100)
    assert report.ettr == pytest.approx(58 / 110, abs=1e-4)
    assert report.step_time_s == pytest.approx(1.0)
    (cost,) = report.recoveries
    assert cost.recomputed_steps == 10
    assert cost.lost_s == {
        "detection": 6,
        "recovery": 3,
        "queue": 7,
        "recompute": 10,
        "startup": 8,  # the restart's start-up, not the first attempt's
    }


def test_a_checkpoint_step_no_line_named_is_interpolated_and_marked_estimated() -> None:
    record = one_interruption()
    record.attempts[0].marks = marks(1, 40, 5, every=7)  # steps 1, 7, 14, 21, 28, 35
    report = account_job(record, now=at(1000))
    assert report.parts["recompute"].basis == "estimated"
    assert report.parts["productive"].basis == "estimated"
    assert seconds(report, "recompute") == pytest.approx(5)  # 30 (34 s) -> last line, 35 (39 s)
    assert seconds(report, "detection") == pytest.approx(11)  # 39 s -> 50 s
    assert report.recoveries[0].recomputed_steps == 5


def test_a_job_that_resumed_from_scratch_loses_all_of_its_first_attempt() -> None:
    record = one_interruption(resume_step=None)
    record.attempts[1].resumed_step = 0
    record.attempts[1].marks = marks(1, 60, 68)
    report = account_job(record, now=at(1000))
    assert seconds(report, "recompute") == 39  # step 1 (5 s) .. step 40 (44 s)
    assert report.recoveries[0].recomputed_steps == 40


def test_what_the_job_said_it_resumed_from_beats_the_recovery_verdict() -> None:
    record = one_interruption(resume_step=40)  # verdict said 40; the job resumed from 30
    report = account_job(record, now=at(1000))
    assert report.recoveries[0].recomputed_steps == 10


def test_a_running_job_is_accounted_until_now_and_a_waiting_one_is_in_the_queue() -> None:
    record = one_interruption()
    record.ended_at, record.state, record.current_attempt = None, "PENDING", 0
    record.attempts = record.attempts[:1]
    record.recoveries[0] = record.recoveries[0].model_copy(
        update={"running_again_at": None, "closed_at": None, "outcome": None}
    )
    report = account_job(record, now=at(70))
    assert report.wall_s == 70
    assert seconds(report, "queue") == 17  # requeued at 53 s, still waiting at 70 s
    assert report.recoveries[0].outcome is None


def test_a_recovery_that_stopped_the_job_is_recovery_time_then_the_job_is_over() -> None:
    record = one_interruption(
        requeued_at=None, running_again_at=None, closed_at=at(52), outcome="stopped"
    )
    record.attempts = record.attempts[:1]
    record.ended_at, record.state, record.current_attempt = at(52), "FAILED", 0
    report = account_job(record, now=at(1000))
    assert report.wall_s == 52
    assert seconds(report, "recovery") == 2
    assert seconds(report, "queue") == 0


def test_without_progress_signals_goodput_is_unknown_not_guessed() -> None:
    record = one_interruption()
    for attempt in record.attempts:
        attempt.marks = []
    report = account_job(record, now=at(1000))
    assert report.goodput is None and report.ettr is None
    assert seconds(report, "productive") == 0
    assert seconds(report, "detection") == 1  # from the first sensor observation
    assert seconds(report, "recovery") == 3 and seconds(report, "queue") == 7
    assert any("no progress signals" in note for note in report.notes)


def test_skewed_clocks_never_make_negative_time() -> None:
    # Slurm says the new attempt started (whole seconds) before Temporal recorded the requeue
    record = one_interruption(requeued_at=at(60.4))
    report = account_job(record, now=at(1000))
    assert all(segment.seconds >= 0 for segment in report.segments)
    assert sum(part.seconds for part in report.parts.values()) == pytest.approx(report.wall_s)


def test_hostile_progress_lines_outside_the_attempt_or_going_back_are_ignored() -> None:
    record = one_interruption()
    record.attempts[0].marks += [
        ProgressMark(step=10_000, at=at(-500)),  # before the job started
        ProgressMark(step=3, at=at(44.5)),  # goes back
    ]
    report = account_job(record, now=at(1000))
    assert seconds(report, "productive") == 58
    assert report.recoveries[0].recomputed_steps == 10


def test_two_interruptions_and_the_cluster_total() -> None:
    record = one_interruption()
    second = RecoveryRecord(
        workflow_id="recover/c/7/1",
        attempt=1,
        fault_class="gpu.hardware",
        outcome="recovered",
        started_at=at(80),
        requeued_at=at(81),
        closed_at=at(86),
        resume_step=40,
    )
    record.recoveries.append(second)
    # attempt 1 reaches step 41 (78 s), then its GPU fails; it resumes from 40
    record.attempts[1].marks = marks(31, 41, 68)
    record.attempts.append(Attempt(index=2, started_at=at(85), marks=marks(41, 60, 88)))
    record.current_attempt = 2
    report = account_job(record, now=at(1000))
    assert sum(part.seconds for part in report.parts.values()) == pytest.approx(100)
    assert [r.recomputed_steps for r in report.recoveries] == [10, 1]
    assert seconds(report, "queue") == 7 + 4
    other = account_job(one_interruption(), now=at(1000))
    total = cluster_total([report, other])
    assert total.jobs == 2 and total.recoveries == 3
    assert total.wall_s == 200
    productive = report.parts["productive"].seconds + other.parts["productive"].seconds
    assert total.goodput == pytest.approx(productive / 200, abs=1e-4)


def test_step_time_is_the_median_rate_and_steps_between_marks_are_interpolated() -> None:
    attempt = Attempt(index=0, marks=marks(1, 20, 0, every=10))  # steps 1, 10, 20
    assert step_time([attempt]) == pytest.approx(1.0)
    window = (at(0), at(30))
    found = time_of_step(attempt.marks, 15, 1.0, within=window)
    assert found == (at(14), "estimated")
    assert time_of_step(attempt.marks, 10, 1.0, within=window) == (at(9), "measured")
    # beyond the marks it is extrapolated, never past the window (a step is the job's word)
    assert time_of_step(attempt.marks, 25, 1.0, within=window) == (at(24), "estimated")
    assert time_of_step(attempt.marks, 10**11, 1.0, within=window) == (at(30), "estimated")


def test_a_recovery_that_starts_after_the_job_ended_adds_nothing_past_its_end() -> None:
    """Found by the chaos soak (seed 1): a job failed, and its recovery (ended without a
    requeue) started seconds later; the detection and recovery after the job's end were
    counted too, and the parts added up to more than its wall time."""
    record = one_interruption(
        requeued_at=None, running_again_at=None, first_observed_at=at(47), started_at=at(50),
        closed_at=at(58), outcome="nothing_to_do",
    )  # fmt: skip
    record.attempts = record.attempts[:1]
    record.ended_at, record.state, record.current_attempt = at(46), "FAILED", 0
    report = account_job(record, now=at(1000))
    assert report.wall_s == 46
    assert sum(part.seconds for part in report.parts.values()) == pytest.approx(46)
    assert seconds(report, "recovery") == 0


def test_a_job_without_progress_lines_whose_recovery_came_late_still_adds_up() -> None:
    """Found by the chaos soak (seed 1): a job whose launch failed printed no step; its
    recovery was first observed after the job had ended."""
    record = one_interruption(
        requeued_at=None, running_again_at=None, first_observed_at=at(20), started_at=at(22),
        closed_at=at(25), outcome="nothing_to_do",
    )  # fmt: skip
    record.attempts = [Attempt(index=0, started_at=at(0), marks=[])]
    record.ended_at, record.state, record.current_attempt = at(8), "FAILED", 0
    report = account_job(record, now=at(1000))
    assert report.wall_s == 8
    assert sum(part.seconds for part in report.parts.values()) == pytest.approx(8)


def test_a_recovery_that_requeued_nothing_while_the_attempt_ran_on_interrupts_nothing() -> None:
    """A node agent's silence reported the job at 20 s; the recovery waited for a second
    source and closed when the job completed: the attempt was productive throughout."""
    record = JobRecord(
        cluster="c",
        job_id="8",
        submitted_at=at(-10),
        ended_at=at(50),
        state="COMPLETED",
        current_attempt=0,
        attempts=[Attempt(index=0, started_at=at(0), marks=marks(1, 40, 5), resumed_step=0)],
        recoveries=[
            RecoveryRecord(
                workflow_id="recover/c/8/0",
                attempt=0,
                fault_class="node.lost",
                outcome="job_completed",
                started_at=at(20),
                first_observed_at=at(19),
                closed_at=at(55),
            )
        ],
    )
    report = account_job(record, now=at(1000))
    assert seconds(report, "productive") == 39  # step 1 (5 s) -> step 40 (44 s)
    assert seconds(report, "detection") == seconds(report, "recovery") == 0
    assert sum(part.seconds for part in report.parts.values()) == pytest.approx(report.wall_s)
    assert any("requeued nothing while attempt 0 ran on" in note for note in report.notes)
