"""Which job an earlier recovery record belongs to: a job *incarnation*.

Slurm reuses job ids (its counter wraps at ``MaxJobId``; a controller whose state was reset
counts again from ``FirstJobId``), so a recovery record keyed by cluster and job id alone
may be another job's: the new job would inherit that job's restart budget and loop counts.
Nor does any time Slurm shows stay fixed across a requeue: ``scontrol requeue`` (an
administrator's, resurrect's, Slurm's own after a node failure, or the job owner's) sets
``SubmitTime`` to the moment of the requeue, and ``EligibleTime``, ``AccrueTime`` and
``StartTime`` with it; the owner can move ``EligibleTime``/``StartTime`` at will
(``scontrol update StartTime=``). ``Restarts`` only grows (the owner can requeue, never
lower it) and is 0 until the first requeue.

An incarnation is therefore named by what neither a requeue nor the owner changes, read from
Slurm (never from the job): the owner's uid, and the **earliest submit time resurrect saw
of it**. A recovery that reads the job with ``Restarts=0`` sees the submit time of the
job's first attempt itself. A later recovery takes the incarnation its job's earlier
recoveries recorded (same uid, the newest one submitted no later than the job's submit time
now); only when none is recorded does it name a new one from the submit time it reads. The
order of submit times does the rest: a job id is reused only after the job holding it is
gone from slurmctld, so every older incarnation of the id was submitted, and recorded,
before this one's first submit time, and any submit time read later is later still.
What the owner controls moves no record: a requeue of their own makes the submit time later
(and the newest recorded incarnation no later than it stays theirs), and uid, ``Restarts``
and the earliest submit time are not theirs to set.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio.client import WorkflowExecution

from resurrect.contracts import JobInfo
from resurrect.numbers import is_ascii_digits
from resurrect.temporal import search_attributes as sa

_UNKNOWN = "-"


@dataclass(frozen=True, order=True)
class Incarnation:
    """One job incarnation: its owner's uid and the earliest submit time (epoch seconds,
    slurmctld's clock) resurrect saw of it; None where Slurm did not say."""

    uid: int | None
    submitted: int | None

    @property
    def key(self) -> str:
        """The search-attribute value (``ResurrectIncarnation``): ``<uid>/<submitted>``."""
        return f"{_text(self.uid)}/{_text(self.submitted)}"

    @classmethod
    def parse(cls, key: object) -> Incarnation | None:
        """The incarnation a record names; None for no key (a record older than keys) or
        one that is not of the shape :attr:`key` writes."""
        if not isinstance(key, str):
            return None
        uid, sep, submitted = key.partition("/")
        if not sep or not _well_formed(uid) or not _well_formed(submitted):
            return None
        return cls(_number(uid), _number(submitted))


def incarnation_of(job: JobInfo, recorded: Iterable[Incarnation | None]) -> Incarnation:
    """The incarnation of ``job`` (as Slurm shows it now), given those its id's earlier
    recoveries recorded (None: a record without one).

    Never requeued (``Restarts=0``): its submit time is its first. Otherwise the newest
    recorded incarnation of the same uid submitted no later than the job's submit time now,
    or, when none is, a new one from that submit time.
    """
    now = _epoch(job.submit_time)
    if job.restart_count == 0:
        return Incarnation(job.user_id, now)
    candidates = [
        r
        for r in recorded
        if r is not None
        and r.uid == job.user_id
        and (now is None or r.submitted is None or r.submitted <= now)
    ]
    if not candidates:
        return Incarnation(job.user_id, now)
    return max(candidates, key=lambda r: -1 if r.submitted is None else r.submitted)


def same_job(record: Incarnation | None, incarnation: Incarnation) -> bool:
    """Whether a record of the job's id is this incarnation's: it names it, or it names none
    (recorded before records named one; counted, so an upgrade refunds no budget)."""
    return record is None or record == incarnation


@dataclass
class JobsRecoveries:
    """A job id's recoveries split by incarnation: the job's (:func:`same_job`), the others'."""

    incarnation: Incarnation
    own: list[WorkflowExecution]
    others: list[WorkflowExecution]


def recorded_incarnation(execution: WorkflowExecution) -> Incarnation | None:
    """The incarnation a recovery recorded (``ResurrectIncarnation``); None: none."""
    return Incarnation.parse(execution.typed_search_attributes.get(sa.INCARNATION))


def split_by_incarnation(job: JobInfo, recoveries: Sequence[WorkflowExecution]) -> JobsRecoveries:
    """``job``'s incarnation (:func:`incarnation_of`) among its id's ``recoveries``, and
    which of them are its own."""
    recorded = [recorded_incarnation(r) for r in recoveries]
    incarnation = incarnation_of(job, recorded)
    split = JobsRecoveries(incarnation, [], [])
    for recovery, named in zip(recoveries, recorded, strict=True):
        (split.own if same_job(named, incarnation) else split.others).append(recovery)
    return split


def _epoch(at: datetime | None) -> int | None:
    if at is None:
        return None
    return int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp())


def _text(value: int | None) -> str:
    return _UNKNOWN if value is None else str(value)


def _well_formed(text: str) -> bool:
    return text == _UNKNOWN or is_ascii_digits(text)


def _number(text: str) -> int | None:
    return None if text == _UNKNOWN else int(text)
