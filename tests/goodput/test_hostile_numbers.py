"""Numbers a job prints (steps, stated save seconds) cannot break anyone's goodput figures:
every time derived from them stays inside the attempt's window, one job's failure costs that
job alone, and the advice note is a note whatever goes wrong."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.no_recoveries import NoRecoveries

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState
from resurrect.goodput import report as report_module
from resurrect.goodput.accounting import account_job
from resurrect.goodput.advice import advise
from resurrect.goodput.advice_note import PREFIX, RatesCache, advice_note
from resurrect.goodput.collect import build_record
from resurrect.goodput.model import RecoveryRecord
from resurrect.goodput.progress import parse_progress
from resurrect.goodput.rates import cluster_rates
from resurrect.goodput.report import GoodputReport, goodput_report
from resurrect.testing import FakeScheduler

NOW = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)
START = NOW - timedelta(seconds=100)
HUGE = 99_999_999_999  # eleven digits


def stamp(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def overflowing_output() -> str:
    """The attack: two progress lines one second apart with eleven-digit steps after a
    resume from step 0 (start-up is then estimated back 10^11 steps)."""
    return (
        f"[rank0] resumed from /ckpt at step 0 t={stamp(1)}\n"
        f"[rank0] step {HUGE - 1} t={stamp(5)}\n"
        f"[rank0] step {HUGE} t={stamp(6)}\n"
        f"[rank0] saved checkpoint step_{HUGE * 10} t={stamp(8)}\n"
    )


def normal_output() -> str:
    return "".join(f"[rank0] step {s}/90 loss 0.1 t={stamp(10 + s)}\n" for s in range(1, 91))


def opted_in_scheduler(tmp_path: Path) -> FakeScheduler:
    scheduler = FakeScheduler.with_nodes(2, cluster_name="c")
    for job_id, text in (("5", overflowing_output()), ("6", normal_output())):
        out = tmp_path / f"{job_id}.out"
        out.write_text(text)
        scheduler.jobs[job_id] = JobInfo(
            job_id=job_id,
            state=JobState.RUNNING,
            nodes=["node1"],
            start_time=START,
            stdout_path=str(out),
        )
    return scheduler


async def report_of(scheduler: FakeScheduler) -> GoodputReport:
    return await goodput_report(
        NoRecoveries(),  # type: ignore[arg-type]
        scheduler,
        "c",
        now=NOW,
        since=NOW - timedelta(hours=1),
        opted_in=lambda job: True,
    )


def test_eleven_digit_steps_stay_inside_the_attempt_window() -> None:
    job = JobInfo(job_id="5", state=JobState.RUNNING, nodes=["node1"], start_time=START)
    record = build_record("c", "5", job, [], parse_progress(overflowing_output().splitlines()))
    result = account_job(record, NOW)
    assert result.start == START and result.end == NOW
    assert all(START <= s.start <= s.end <= NOW for s in result.segments)
    assert sum(p.seconds for p in result.parts.values()) == pytest.approx(result.wall_s)


async def test_one_jobs_numbers_do_not_break_the_cluster_report(tmp_path: Path) -> None:
    report = await report_of(opted_in_scheduler(tmp_path))
    by_id = {job.job_id: job for job in report.jobs}
    assert by_id["6"].goodput == 0.89
    assert by_id["5"].wall_s == 100


async def test_any_failure_of_one_job_costs_that_job_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = report_module.account_job

    def fails_for_five(record: Any, now: datetime) -> Any:
        if record.job_id == "5" and record.attempts:
            raise ZeroDivisionError("a defect nobody foresaw")
        return real(record, now)

    monkeypatch.setattr(report_module, "account_job", fails_for_five)
    report = await report_of(opted_in_scheduler(tmp_path))
    by_id = {job.job_id: job for job in report.jobs}
    assert by_id["6"].goodput == 0.89
    assert by_id["5"].goodput is None
    assert any("ZeroDivisionError" in note for note in by_id["5"].notes)
    assert report.cluster.goodput == 0.89  # the failed job adds nothing


def config() -> ResurrectConfig:
    return ResurrectConfig.model_validate({"cluster": {"name": "c"}})


async def test_the_advice_note_of_a_job_with_overflowing_steps_is_a_note(
    tmp_path: Path,
) -> None:
    scheduler = opted_in_scheduler(tmp_path)
    cache = RatesCache()
    note = await advice_note(
        NoRecoveries(),  # type: ignore[arg-type]
        scheduler,
        config(),
        scheduler.jobs["5"],
        cache=cache,
    )
    assert note.startswith(PREFIX)
    cache.cancel()


async def test_the_advice_note_catches_every_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import resurrect.goodput.advice_note as advice_note_module

    async def broken(*args: object, **kwargs: object) -> Any:
        raise KeyError("unforeseen")

    monkeypatch.setattr(advice_note_module, "job_goodput", broken)
    scheduler = FakeScheduler.with_nodes(1, cluster_name="c")
    job = JobInfo(job_id="9", state=JobState.RUNNING, nodes=["node1"])
    note = await advice_note(
        NoRecoveries(),  # type: ignore[arg-type]
        scheduler,
        config(),
        job,
        cache=RatesCache(),
    )
    assert note.startswith(PREFIX + "unavailable (KeyError")


_NUMBER = st.one_of(
    st.integers(0, 50), st.integers(0, 10**12 - 1), st.sampled_from([0, 1, HUGE, 10**12 - 1])
)
_SECONDS = st.one_of(st.floats(0, 100, allow_nan=False), st.integers(0, 10**9 - 1))
_LINE = st.one_of(
    st.builds(lambda n, t: f"[rank0] step {n} t={stamp(t)}", _NUMBER, st.floats(-50, 200)),
    st.builds(
        lambda n, t: f"[rank0] resumed from /c at step {n} t={stamp(t)}",
        _NUMBER,
        st.floats(-50, 200),
    ),
    st.builds(
        lambda n, t: f"saving checkpoint at iteration {n} t={stamp(t)}", _NUMBER, st.floats(0, 99)
    ),
    st.builds(
        lambda n, s, t: (
            f"successfully saved checkpoint from iteration {n} in {s} seconds t={stamp(t)}"
        ),
        _NUMBER,
        _SECONDS,
        st.floats(0, 99),
    ),
    st.builds(lambda n, t: f"checkpoint /c/step_{n} t={stamp(t)}", _NUMBER, st.floats(0, 99)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(_LINE, max_size=12),
    resume_step=st.one_of(st.none(), _NUMBER),
    recovered_at=st.floats(1, 99),
)
def test_fuzz_printed_numbers_never_escape_the_window_or_raise(
    lines: list[str], resume_step: int | None, recovered_at: float
) -> None:
    job = JobInfo(
        job_id="5", state=JobState.RUNNING, nodes=["node1"], start_time=START, restart_count=1
    )
    recovery = RecoveryRecord(
        workflow_id="recover/c/5/0",
        cluster="c",
        job_id="5",
        attempt=0,
        fault_class="node.lost",
        outcome="recovered",
        started_at=START + timedelta(seconds=recovered_at),
        requeued_at=START + timedelta(seconds=recovered_at + 1),
        running_again_at=START + timedelta(seconds=recovered_at + 2),
        interrupted_attempt_started_at=START - timedelta(seconds=60),
        resume_step=resume_step,
    )
    record = build_record("c", "5", job, [recovery], parse_progress(lines))
    result = account_job(record, NOW)
    assert result.start is not None
    assert all(result.start <= s.start <= s.end <= result.end for s in result.segments)
    assert sum(p.seconds for p in result.parts.values()) == pytest.approx(result.wall_s, abs=0.01)
    if result.save_s is not None:
        assert result.save_s <= result.wall_s
    advise(result, cluster_rates([result], 0))


async def test_one_jobs_advice_failing_leaves_the_others_gauges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from resurrect.goodput import publisher

    report = await report_of(opted_in_scheduler(tmp_path))
    advised: list[str] = []

    def fails_for_five(job: Any, rates: Any) -> Any:
        if job.job_id == "5":
            raise OverflowError("a defect nobody foresaw")
        advised.append(job.job_id)
        return advise(job, rates)

    monkeypatch.setattr(publisher, "advise", fails_for_five)
    publisher.publish_advice(report, "c", cluster_rates(report.jobs, 0))
    assert advised == ["6"]
