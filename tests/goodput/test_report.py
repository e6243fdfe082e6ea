"""The report's jobs: those with recoveries, and opted-in jobs that ran without one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from support.no_recoveries import NoRecoveries

from resurrect.contracts import JobInfo, JobState
from resurrect.goodput.report import goodput_report
from resurrect.testing import FakeScheduler

NOW = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)


def stamp(seconds: float) -> str:
    return (NOW - timedelta(seconds=100 - seconds)).isoformat(timespec="milliseconds")


async def test_an_opted_in_job_that_was_never_interrupted_counts_in_the_cluster_total(
    tmp_path: Path,
) -> None:
    out = tmp_path / "job.out"
    out.write_text(
        f"[rank0] no intact checkpoint: starting from scratch t={stamp(1)}\n"
        + "".join(f"[rank0] step {s}/90 loss 0.1 t={stamp(10 + s)}\n" for s in range(1, 91))
    )
    scheduler = FakeScheduler.with_nodes(2, cluster_name="c")
    base = {
        "state": JobState.RUNNING,
        "nodes": ["node1"],
        "start_time": NOW - timedelta(seconds=100),
    }
    scheduler.jobs["5"] = JobInfo(job_id="5", comment="opted", stdout_path=str(out), **base)
    scheduler.jobs["6"] = JobInfo(job_id="6", comment="", **base)  # not opted in
    report = await goodput_report(
        NoRecoveries(),  # type: ignore[arg-type]
        scheduler,
        "c",
        now=NOW,
        since=NOW - timedelta(hours=1),
        opted_in=lambda job: job.comment == "opted",
    )
    (job,) = report.jobs
    assert job.job_id == "5" and job.recoveries == []
    assert job.parts["startup"].seconds == 11  # start -> step 1
    assert job.parts["productive"].seconds == 89  # step 1 -> step 90
    assert job.goodput == 0.89
    assert report.cluster.jobs == 1 and report.cluster.goodput == 0.89
