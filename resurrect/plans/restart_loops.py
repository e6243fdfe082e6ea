"""Restart loops, from what the job's recoveries recorded (rules 9 and 10 of the decision).

An attempt of a job is the run between two interruptions; each recovery records the last
training step its attempt printed (``last_step``) and the checkpoint step it set the next
attempt to resume from (``resume_step``). An attempt **made progress** when it printed a step
past everything the attempts before it reached, or left a newer checkpoint than the one it
started from. Nothing known about an attempt (no step printed, no checkpoint found) is not
taken as no progress.

* Rule 9: a job whose last ``no_progress_restarts`` restarts all made no progress is in a
  restart loop: it is stopped, whatever the fault (a job whose own code breaks its node, a
  fault misread as hardware, a checkpoint interval longer than the time between faults).
* Rule 10: restarts after faults that are not the job's are free, but at most
  ``free_restarts_per_window`` of them in ``free_restart_window_s``; beyond, each is charged
  to the job's budget.

Steps come from the job's own output, so a job can claim progress it did not make: that
only costs its own restarts, and rule 10 still bounds what it gets for free.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from resurrect.contracts import AttemptRecord, JobPolicy, RestartHistory


def attempt_chain(history: RestartHistory, restart_count: int) -> list[AttemptRecord]:
    """The attempts the records know without a gap, oldest first, ending with the one
    interrupted now (attempt ``restart_count``, with the step it printed last)."""
    by_count = {record.restart_count: record for record in history.earlier}
    chain = [AttemptRecord(restart_count=restart_count, last_step=history.last_step)]
    while (earlier := by_count.get(chain[0].restart_count - 1)) is not None:
        chain.insert(0, earlier)
    return chain


def made_progress(attempt: AttemptRecord, earlier: Sequence[AttemptRecord]) -> bool | None:
    """Whether ``attempt`` got further than the ``earlier`` attempts (oldest first): a step
    past the furthest they reached, or a newer checkpoint than the one it started from; None
    when nothing is known about it."""
    if attempt.last_step is None and attempt.resume_step is None:
        return None
    reached = [s for a in earlier for s in (a.last_step, a.resume_step) if s is not None]
    if attempt.last_step is not None and attempt.last_step > max(reached, default=-1):
        return True
    started = earlier[-1].resume_step if earlier else None
    started_from = -1 if started is None else started
    return attempt.resume_step is not None and attempt.resume_step > started_from


def restart_loop(history: RestartHistory, restart_count: int, policy: JobPolicy) -> str | None:
    """Rule 9: why the job is in a restart loop (its last ``no_progress_restarts`` restarts
    made no progress, each attempt named with its steps); None when it is not."""
    restarts = policy.no_progress_restarts
    chain = attempt_chain(history, restart_count)
    if len(chain) < restarts + 1:
        return None
    first = len(chain) - restarts
    if any(made_progress(chain[i], chain[:i]) is not False for i in range(first, len(chain))):
        return None
    window = chain[first - 1 :]
    steps = "; ".join(
        f"attempt {a.restart_count}: last step {_step(a.last_step)},"
        f" checkpoint {_step(a.resume_step) if a is not chain[-1] else 'not yet read'}"
        for a in window
    )
    return (
        f"restart loop: the last {restarts} restarts made no progress (no step past the"
        f" attempt before, no newer checkpoint): {steps}; stop and notify"
    )


def free_restarts_used(history: RestartHistory, policy: JobPolicy, now: datetime) -> int:
    """Rule 10: the free restarts the job had within ``free_restart_window_s`` before
    ``now``."""
    since = now - timedelta(seconds=policy.free_restart_window_s)
    return sum(
        1
        for record in history.earlier
        if record.requeued
        and not record.charged
        and record.closed_at is not None
        and record.closed_at >= since
    )


def _step(step: int | None) -> str:
    return "?" if step is None else str(step)
