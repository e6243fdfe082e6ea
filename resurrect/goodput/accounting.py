"""Goodput accounting: split a job's wall time into productive and lost parts.

Pure functions over a :class:`JobRecord`. The job's timeline is walked once, in order, from
its first start to its end (or ``now``), and cut at observed boundaries:

    attempt i starts -> first step done -> checkpoint step it later resumes from -> last
    progress before the fault -> recovery started -> job requeued -> attempt i+1 starts ...

Each stretch between two boundaries is one :class:`Segment` of one part, so the parts always
add up to the wall time. A boundary taken from a timestamp is *measured*; one interpolated
from the measured step time (a checkpoint step no progress line named, the first step when
the first line came later) is *estimated*. Clock skew between sources (Slurm's whole-second
times, Temporal's event times) never makes a negative stretch: the walk only moves forward.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from datetime import datetime

from resurrect.carry_over import carry_over
from resurrect.goodput.model import (
    LOST_PARTS,
    PART_MEANING,
    PART_NAMES,
    Attempt,
    Basis,
    ClusterGoodput,
    JobGoodput,
    JobRecord,
    Part,
    PartName,
    ProgressMark,
    RecoveryCost,
    RecoveryRecord,
    Segment,
)
from resurrect.goodput.saves import save_times
from resurrect.goodput.window import shifted_within

_INTERRUPTION_PARTS = frozenset({"detection", "recovery", "queue", "recompute"})


def step_time(attempts: Sequence[Attempt]) -> float | None:
    """Median seconds per step between consecutive progress marks of the same attempt."""
    rates: list[float] = []
    for attempt in attempts:
        marks = sorted(attempt.marks, key=lambda m: m.at)
        for before, after in itertools.pairwise(marks):
            steps = after.step - before.step
            seconds = (after.at - before.at).total_seconds()
            if steps > 0 and seconds > 0:
                rates.append(seconds / steps)
    return statistics.median(rates) if rates else None


def time_of_step(
    marks: Sequence[ProgressMark],
    step: int,
    seconds_per_step: float | None,
    *,
    within: tuple[datetime, datetime],
) -> tuple[datetime, Basis] | None:
    """When ``step`` was done: a mark naming it (measured), else interpolated (estimated),
    never outside ``within`` (the attempt's window: the step is the job's word)."""
    if not marks:
        return None
    for mark in marks:
        if mark.step == step:
            return mark.at, "measured"
    for before, after in itertools.pairwise(marks):
        if before.step < step < after.step:
            fraction = (step - before.step) / (after.step - before.step)
            return before.at + (after.at - before.at) * fraction, "estimated"
    if seconds_per_step is None:
        return None
    anchor = marks[0] if step < marks[0].step else marks[-1]
    low, high = within
    moved = shifted_within(anchor.at, (step - anchor.step) * seconds_per_step, low, high)
    return moved, "estimated"


def _clean_marks(
    marks: Sequence[ProgressMark], start: datetime | None, end: datetime, base: int | None
) -> list[ProgressMark]:
    """The marks inside the attempt's window, after its resume step, steps never going back."""
    kept: list[ProgressMark] = []
    for mark in sorted(marks, key=lambda m: m.at):
        if (start is not None and mark.at < start) or mark.at > end:
            continue
        if base is not None and mark.step <= base:
            continue
        if kept and mark.step <= kept[-1].step:
            continue
        kept.append(mark)
    return kept


class _Walk:
    """The timeline cursor: each ``add`` covers from the cursor to ``until`` with one part,
    never past the job's ``end`` (a recovery may start after the job ended: that time is not
    the job's), so the parts add up to the wall time."""

    def __init__(self, start: datetime, end: datetime) -> None:
        self.cursor = start
        self.end = end
        self.segments: list[Segment] = []

    def add(self, part: PartName, until: datetime | None, basis: Basis, attempt: int) -> None:
        if until is None:
            return
        until = min(until, self.end)
        if until <= self.cursor:
            return
        self.segments.append(
            Segment(part=part, start=self.cursor, end=until, basis=basis, attempt=attempt)
        )
        self.cursor = until


def _attempt_start(record: JobRecord, index: int) -> tuple[datetime | None, Basis]:
    attempt = next((a for a in record.attempts if a.index == index), None)
    if attempt is not None and attempt.started_at is not None:
        return attempt.started_at, "measured"
    recovery = _recovery_of(record, index)
    if recovery is not None and recovery.interrupted_attempt_started_at is not None:
        return recovery.interrupted_attempt_started_at, "measured"
    previous = _recovery_of(record, index - 1)
    if previous is not None and previous.running_again_at is not None:
        # seen running by the wait step's poll: at most one poll interval late
        return previous.running_again_at, "estimated"
    return None, "estimated"


def _recovery_of(record: JobRecord, attempt: int) -> RecoveryRecord | None:
    return next((r for r in record.recoveries if r.attempt == attempt), None)


def _last_known(record: JobRecord) -> datetime | None:
    times: list[datetime] = []
    for attempt in record.attempts:
        times.extend(m.at for m in attempt.marks)
        if attempt.started_at:
            times.append(attempt.started_at)
    for recovery in record.recoveries:
        times.extend(
            t
            for t in (recovery.started_at, recovery.closed_at, recovery.running_again_at)
            if t is not None
        )
    return max(times) if times else None


def account_job(record: JobRecord, now: datetime) -> JobGoodput:
    """Split ``record``'s wall time (first start to end, or ``now`` while it runs)."""
    notes = list(record.notes)
    indexes = sorted(
        {a.index for a in record.attempts}
        | {r.attempt for r in record.recoveries}
        | {r.attempt + 1 for r in record.recoveries if r.requeued_at is not None}
        | ({record.current_attempt} if record.current_attempt is not None else set())
    )
    first_start = next(
        (start for i in indexes for start in [_attempt_start(record, i)[0]] if start), None
    )
    if record.ended_at is not None:
        end = record.ended_at
    elif record.state is None:
        end = _last_known(record) or now
        notes.append("job no longer known to the scheduler: accounted until the last event")
    else:
        end = now
    seconds_per_step = step_time(record.attempts)
    if first_start is None or end <= first_start:
        return _result(record, first_start, end, [], seconds_per_step, notes, measured=False)

    walk = _Walk(first_start, end)
    recomputed_steps: dict[int, int] = {}
    measured_any = False
    for position, index in enumerate(indexes):
        start, start_basis = _attempt_start(record, index)
        recovery = _recovery_of(record, index)
        attempt = next((a for a in record.attempts if a.index == index), None)
        if recovery is not None and _ran_on(recovery, attempt):
            notes.append(f"{recovery.workflow_id}: requeued nothing while attempt {index} ran on")
            recovery = None
        following = indexes[position + 1] if position + 1 < len(indexes) else None
        attempt_end = recovery.started_at if recovery else end
        # time before this attempt started that nothing else claimed (clock skew, a gap)
        walk.add("unattributed", start, start_basis, index)
        base = _resume_base(record, index, attempt)
        marks = _clean_marks(attempt.marks if attempt else [], start, attempt_end, base)
        if marks:
            measured_any = True
            first = marks[0]
            if base is not None and first.step == base + 1:
                walk.add("startup", first.at, "measured", index)
            elif base is not None and seconds_per_step is not None:
                earlier = (first.step - base - 1) * seconds_per_step
                began = shifted_within(first.at, -earlier, walk.cursor, first.at)
                walk.add("startup", began, "estimated", index)
            else:
                walk.add("startup", first.at, "estimated", index)
            last = marks[-1]
            if recovery is None:
                walk.add("productive", last.at, "measured", index)
                walk.add("unattributed", end, "measured", index)
                continue
            resumed = _resumed_step(record, recovery, following)
            if resumed is None:
                walk.add("productive", last.at, "estimated", index)
                notes.append(
                    f"{recovery.workflow_id}: the step resumed from is unknown;"
                    " recomputed work not counted"
                )
            else:
                found = (
                    time_of_step(marks, resumed, seconds_per_step, within=(walk.cursor, last.at))
                    if resumed > 0
                    else None
                )
                basis: Basis
                if resumed <= (base or 0):
                    resumed_at, basis = walk.cursor, "measured"  # nothing of this attempt kept
                elif found is None:
                    resumed_at, basis = last.at, "estimated"
                else:
                    resumed_at, basis = found
                resumed_at = min(max(resumed_at, walk.cursor), last.at)
                walk.add("productive", resumed_at, basis, index)
                walk.add("recompute", last.at, basis, index)
                recomputed_steps[index] = max(0, last.step - max(resumed, base or 0))
            walk.add("detection", recovery.started_at, "measured", index)
        elif recovery is not None:
            walk.add("unattributed", recovery.first_observed_at, "measured", index)
            walk.add("detection", recovery.started_at, "measured", index)
        else:
            walk.add("unattributed", end, "measured", index)
            continue
        _walk_recovery(walk, record, recovery, following, end)
    walk.add("unattributed", end, "measured", indexes[-1] if indexes else 0)
    return _result(
        record,
        first_start,
        end,
        walk.segments,
        seconds_per_step,
        notes,
        measured=measured_any,
        recomputed_steps=recomputed_steps,
    )


def _ran_on(recovery: RecoveryRecord, attempt: Attempt | None) -> bool:
    """A recovery that requeued nothing while its attempt kept making progress (one that
    waited for a second source and saw the attempt complete) interrupted nothing."""
    return (
        recovery.requeued_at is None
        and attempt is not None
        and any(mark.at > recovery.started_at for mark in attempt.marks)
    )


def _resume_base(record: JobRecord, index: int, attempt: Attempt | None) -> int | None:
    """The step this attempt resumed from: its own word, else its recovery's verdict."""
    if attempt is not None and attempt.resumed_step is not None:
        return attempt.resumed_step
    if index == 0:
        return 0
    previous = _recovery_of(record, index - 1)
    return previous.resume_step if previous else None


def _resumed_step(record: JobRecord, recovery: RecoveryRecord, following: int | None) -> int | None:
    nxt = next((a for a in record.attempts if a.index == following), None)
    if nxt is not None and nxt.resumed_step is not None:
        return nxt.resumed_step  # what the job did beats what the recovery predicted
    return recovery.resume_step


def _walk_recovery(
    walk: _Walk,
    record: JobRecord,
    recovery: RecoveryRecord,
    following: int | None,
    end: datetime,
) -> None:
    index = recovery.attempt
    next_start = _attempt_start(record, following)[0] if following is not None else None
    if recovery.requeued_at is not None:
        walk.add("recovery", recovery.requeued_at, "measured", index)
        if next_start is not None:
            basis = _attempt_start(record, following)[1] if following is not None else "estimated"
            walk.add("queue", next_start, basis, index)
        elif recovery.closed_at is not None:
            walk.add("queue", min(recovery.closed_at, end), "measured", index)
        else:
            walk.add("queue", end, "measured", index)  # still waiting to run again
    else:
        walk.add("recovery", min(recovery.closed_at or end, end), "measured", index)


def _result(
    record: JobRecord,
    start: datetime | None,
    end: datetime,
    segments: list[Segment],
    seconds_per_step: float | None,
    notes: list[str],
    *,
    measured: bool,
    recomputed_steps: dict[int, int] | None = None,
) -> JobGoodput:
    parts = _parts(segments)
    wall = (end - start).total_seconds() if start else 0.0
    productive = parts["productive"].seconds
    since_submit = (end - record.submitted_at).total_seconds() if record.submitted_at else None
    if not measured:
        notes.append("no progress signals: the running time cannot be split, goodput unknown")
    recoveries = []
    for recovery in record.recoveries:
        # what this interruption cost: the tail of the attempt it ended, the recovery, the
        # queue wait, and the start-up of the attempt after it
        lost = {name: 0.0 for name in ("detection", "recovery", "queue", "recompute", "startup")}
        for segment in segments:
            tail = segment.attempt == recovery.attempt and segment.part in _INTERRUPTION_PARTS
            restart = segment.attempt == recovery.attempt + 1 and segment.part == "startup"
            if tail or restart:
                lost[segment.part] += segment.seconds
        recoveries.append(
            carry_over(
                recovery,
                RecoveryCost,
                recomputed_steps=(recomputed_steps or {}).get(recovery.attempt),
                lost_s={k: round(v, 3) for k, v in lost.items()},
            )
        )
    saving = save_times(
        record.saves,
        [mark for attempt in record.attempts for mark in attempt.marks],
        [a.started_at for a in record.attempts if a.started_at is not None],
        seconds_per_step,
    )
    return JobGoodput(
        cluster=record.cluster,
        job_id=record.job_id,
        state=record.state,
        start=start,
        end=end,
        wall_s=round(wall, 3),
        since_submit_s=round(since_submit, 3) if since_submit is not None else None,
        goodput=round(productive / wall, 4) if measured and wall > 0 else None,
        ettr=round(productive / since_submit, 4)
        if measured and since_submit and since_submit > 0
        else None,
        step_time_s=round(seconds_per_step, 4) if seconds_per_step is not None else None,
        parts=parts,
        recoveries=recoveries,
        segments=segments,
        nodes=record.nodes,
        save_s=saving.save_s,
        checkpoint_every_s=saving.every_s,
        saves_measured=saving.measured,
        notes=notes,
    )


def _parts(segments: Sequence[Segment]) -> dict[str, Part]:
    parts: dict[str, Part] = {}
    for name in PART_NAMES:
        mine = [s for s in segments if s.part == name]
        basis: Basis = "estimated" if any(s.basis == "estimated" for s in mine) else "measured"
        parts[name] = Part(
            seconds=round(sum(s.seconds for s in mine), 3), basis=basis, note=PART_MEANING[name]
        )
    return parts


def cluster_total(jobs: Sequence[JobGoodput]) -> ClusterGoodput:
    """Sum of every job's parts; goodput and ETTR over the jobs whose goodput is known."""
    known = [job for job in jobs if job.goodput is not None]
    parts: dict[str, Part] = {}
    for name in PART_NAMES:
        seconds = sum(job.parts[name].seconds for job in jobs if name in job.parts)
        estimated = any(job.parts[name].basis == "estimated" for job in jobs if name in job.parts)
        parts[name] = Part(
            seconds=round(seconds, 3),
            basis="estimated" if estimated else "measured",
            note=PART_MEANING[name],
        )
    wall = sum(job.wall_s for job in known)
    productive = sum(job.parts["productive"].seconds for job in known)
    submitted = [job for job in known if job.since_submit_s]
    since = sum(job.since_submit_s or 0.0 for job in submitted)
    return ClusterGoodput(
        jobs=len(jobs),
        recoveries=sum(len(job.recoveries) for job in jobs),
        wall_s=round(sum(job.wall_s for job in jobs), 3),
        goodput=round(productive / wall, 4) if wall > 0 else None,
        ettr=round(sum(j.parts["productive"].seconds for j in submitted) / since, 4)
        if since > 0
        else None,
        parts=parts,
    )


def lost_by_part(job: JobGoodput) -> dict[str, float]:
    """The lost parts of ``job`` in seconds (what the demo reports as ``lost_s``)."""
    return {name: job.parts[name].seconds for name in LOST_PARTS}
