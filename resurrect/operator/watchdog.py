"""Fail-open watchdog: release jobs resurrect held and never released.

It depends on nothing of resurrect but the scheduler backend and this module: no worker, no
Temporal.
``resurrect watchdog`` runs it (a loop, or ``--once`` from the systemd timer unit
``deploy/systemd/resurrect-watchdog.timer``) as the worker's Slurm operator user: a held job
carrying resurrect's hold mark (``scheduler/hold_marker.py``) for longer than
``watchdog.hold_bound_s`` is released. Holds without a valid mark (administrators', owners',
or a mark resurrect did not write: another key's tag, an implausible time) are never
touched; a mark that is not resurrect's is noted once per job and kept.
"""

from __future__ import annotations

import asyncio
import logging
import time

from resurrect.contracts import MutationResult
from resurrect.errors import SchedulerError
from resurrect.job_notes import JobNotes
from resurrect.scheduler.base import Scheduler
from resurrect.scheduler.hold_marker import has_marker, read_mark

log = logging.getLogger(__name__)
_NOTES = JobNotes(log)


async def release_stale_holds(scheduler: Scheduler, bound_s: float) -> list[MutationResult]:
    """One pass: release every job resurrect has held for longer than ``bound_s``."""
    released = []
    for job in await scheduler.list_jobs():
        if not job.held or not has_marker(job.admin_comment):
            continue
        mark = read_mark(
            job.admin_comment,
            key=scheduler.hold_mark_key.get(),
            job_id=job.job_id,
            now=time.time(),
        )
        if mark is not None and mark.problem is not None:
            _NOTES.note(job.job_id, f"watchdog: left held: {mark.problem}")
            continue
        try:
            result = await scheduler.release_stale_hold(job.job_id, bound_s)
        except SchedulerError as exc:  # one job's trouble never stops the others
            log.error("watchdog: cannot release job %s: %s", job.job_id, exc)
            continue
        if result.changed:
            log.warning("watchdog: job %s %s", job.job_id, result.detail)
            released.append(result)

    return released


async def run_watchdog(
    scheduler: Scheduler, bound_s: float, interval_s: float, stop: asyncio.Event
) -> None:
    """Pass after pass every ``interval_s`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            await release_stale_holds(scheduler, bound_s)
        except SchedulerError as exc:
            log.error("watchdog: cannot list jobs: %s", exc)
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
        except TimeoutError:
            pass
