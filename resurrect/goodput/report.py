"""The goodput report of a cluster: which jobs, from which sources, accounted how."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime

from temporalio.client import Client

from resurrect.contracts import JobInfo, JobState
from resurrect.errors import JobNotFound, SchedulerError
from resurrect.goodput.accounting import account_job, cluster_total
from resurrect.goodput.collect import build_record, output_progress
from resurrect.goodput.history import load_recoveries
from resurrect.goodput.model import ClusterGoodput, JobGoodput, JobRecord, Model, RecoveryRecord
from resurrect.numbers import is_ascii_digits
from resurrect.scheduler.base import Scheduler

log = logging.getLogger(__name__)


class GoodputReport(Model):
    generated_at: datetime
    since: datetime | None
    jobs: list[JobGoodput]
    cluster: ClusterGoodput


async def job_goodput(
    scheduler: Scheduler | None,
    cluster: str,
    job_id: str,
    recoveries: list[RecoveryRecord],
    now: datetime,
    *,
    job: JobInfo | None = None,
) -> JobGoodput:
    """One job: its scheduler record (when still known), its recoveries, its output. Any
    failure of its accounting gives a record with no figures and a note saying why."""
    notes: list[str] = []
    if job is None and scheduler is not None:
        try:
            job = await scheduler.get_job(job_id)
        except JobNotFound:
            notes.append(f"job {job_id} is no longer known to the scheduler")
        except SchedulerError as exc:
            notes.append(f"scheduler unavailable: {exc}")
    try:
        record = build_record(cluster, job_id, job, recoveries, output_progress(job))
        record.notes.extend(notes)
        return account_job(record, now)
    except Exception as exc:  # one job's data (its output is hostile) costs that job alone
        log.warning("goodput of job %s not accounted", job_id, exc_info=True)
        notes.append(f"not accounted ({exc.__class__.__name__}: {str(exc)[:200]})")
        state = job.state.value if job is not None else None
        bare = JobRecord(cluster=cluster, job_id=job_id, state=state, notes=notes)
        return account_job(bare, now)


async def goodput_report(
    client: Client,
    scheduler: Scheduler | None,
    cluster: str,
    *,
    now: datetime,
    job_id: str | None = None,
    since: datetime | None = None,
    opted_in: Callable[[JobInfo], bool] | None = None,
    recoveries_read: int = 1000,
) -> GoodputReport:
    """Every job with a recovery since ``since`` (or just ``job_id``) and, with
    ``opted_in``, every opted-in job the scheduler still lists that ran in the window (its
    goodput counts in the cluster total even when nothing interrupted it). At most
    ``recoveries_read`` recoveries are read."""
    recoveries = await load_recoveries(
        client, job_id=job_id, since=since, cluster=cluster, limit=recoveries_read
    )
    by_job: dict[str, list[RecoveryRecord]] = defaultdict(list)
    for recovery in recoveries:
        by_job[recovery.job_id].append(recovery)
    if job_id is not None:
        by_job.setdefault(job_id, [])
    listed: dict[str, JobInfo] = {}
    if opted_in is not None and scheduler is not None and job_id is None:
        try:
            listed = {j.job_id: j for j in await scheduler.list_jobs() if opted_in(j)}
        except SchedulerError:
            listed = {}
        for listed_id, info in listed.items():
            if _ran_in_window(info, since):
                by_job.setdefault(listed_id, [])
    jobs = [
        await job_goodput(scheduler, cluster, jid, records, now, job=listed.get(jid))
        for jid, records in sorted(by_job.items(), key=lambda kv: _numeric(kv[0]))
    ]
    return GoodputReport(generated_at=now, since=since, jobs=jobs, cluster=cluster_total(jobs))


def _ran_in_window(job: JobInfo, since: datetime | None) -> bool:
    if job.start_time is None or job.state is JobState.PENDING:
        return False  # never ran (or waits to run again: its recoveries bring it in)
    if since is None or job.end_time is None:
        return True
    end = job.end_time if job.end_time.tzinfo else job.end_time.replace(tzinfo=since.tzinfo)
    return end >= since


def _numeric(job_id: str) -> tuple[int, str]:
    head = job_id.split("_", 1)[0]
    return (int(head) if is_ascii_digits(head) else 0, job_id)
