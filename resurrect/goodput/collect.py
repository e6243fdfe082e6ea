"""Assembling a :class:`JobRecord`: the scheduler's times, the recoveries' histories, and
the progress lines of the job's output, each progress line given to the attempt it fell in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from resurrect.contracts import JobInfo
from resurrect.goodput.model import Attempt, JobRecord, RecoveryRecord
from resurrect.goodput.progress import Progress, read_progress


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def attempt_starts(
    job: JobInfo | None, recoveries: Sequence[RecoveryRecord]
) -> dict[int, datetime]:
    """When each attempt started, as far as Slurm and the recoveries' evidence say."""
    starts: dict[int, datetime] = {}
    for recovery in recoveries:
        if recovery.interrupted_attempt_started_at is not None:
            starts[recovery.attempt] = recovery.interrupted_attempt_started_at
    if job is not None and job.start_time is not None:
        starts[job.restart_count] = _utc(job.start_time)  # type: ignore[assignment]
    return starts


def build_record(
    cluster: str,
    job_id: str,
    job: JobInfo | None,
    recoveries: Sequence[RecoveryRecord],
    progress: Progress | None,
) -> JobRecord:
    """Pure: one job's record from what each source said."""
    ordered = sorted(recoveries, key=lambda r: r.started_at)
    starts = attempt_starts(job, ordered)
    indexes = sorted(
        set(starts)
        | {r.attempt for r in ordered}
        | ({job.restart_count} if job is not None else set())
    )
    # the window of each attempt: from its start (or the previous recovery's end) on
    lower: dict[int, datetime] = {}
    for index in indexes:
        if index in starts:
            lower[index] = starts[index]
        else:
            previous = next((r for r in ordered if r.attempt == index - 1), None)
            if previous is not None:
                lower[index] = previous.running_again_at or previous.started_at

    def owner(at: datetime) -> int | None:
        candidates = [i for i, t in lower.items() if t <= at]
        return max(candidates) if candidates else (indexes[0] if indexes else None)

    attempts = {i: Attempt(index=i, started_at=starts.get(i)) for i in indexes}
    notes: list[str] = []
    saves = []
    if progress is not None:
        saves = list(progress.saves)
        for mark in progress.marks:
            holder = owner(mark.at)
            if holder is not None:
                attempts[holder].marks.append(mark)
        for resume in progress.resumes:
            holder = owner(resume.at)
            if holder is not None and attempts[holder].resumed_step is None:
                attempts[holder].resumed_step = resume.step
    else:
        notes.append("job output not readable: no progress signals")
    submitted = next(
        (r.job_submitted_at for r in ordered if r.attempt == 0 and r.job_submitted_at), None
    )
    if submitted is None and job is not None and job.restart_count == 0:
        submitted = _utc(job.submit_time)
    return JobRecord(
        cluster=cluster,
        job_id=job_id,
        submitted_at=submitted,
        ended_at=_utc(job.end_time) if job is not None else None,
        state=job.state.value if job is not None else None,
        current_attempt=job.restart_count if job is not None else None,
        attempts=[attempts[i] for i in indexes],
        recoveries=list(ordered),
        saves=saves,
        nodes=job_nodes(job, ordered),
        notes=notes,
    )


def job_nodes(job: JobInfo | None, recoveries: Sequence[RecoveryRecord]) -> int | None:
    """How many nodes the job runs on: the scheduler's count, else the most any recovery saw."""
    if job is not None and (job.num_nodes or job.nodes):
        return job.num_nodes or len(job.nodes)
    seen = max((len(r.nodes) for r in recoveries), default=0)
    return seen or None


def output_progress(job: JobInfo | None) -> Progress | None:
    """The progress lines of the job's output file, when it is a regular file of the job's
    owner that this process can read."""
    if job is None or not job.stdout_path:
        return None
    return read_progress(Path(job.stdout_path), owner_uid=job.user_id)
