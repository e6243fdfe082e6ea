"""The goodput report of a cluster: which jobs, from which sources, accounted how."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from temporalio.client import Client

from resurrect.errors import JobNotFound, SchedulerError
from resurrect.goodput.accounting import account_job, cluster_total
from resurrect.goodput.collect import build_record, output_progress
from resurrect.goodput.history import load_recoveries
from resurrect.goodput.model import ClusterGoodput, JobGoodput, Model, RecoveryRecord
from resurrect.scheduler.base import Scheduler


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
) -> JobGoodput:
    """One job: its scheduler record (when still known), its recoveries, its output."""
    job = None
    notes: list[str] = []
    if scheduler is not None:
        try:
            job = await scheduler.get_job(job_id)
        except JobNotFound:
            notes.append(f"job {job_id} is no longer known to the scheduler")
        except SchedulerError as exc:
            notes.append(f"scheduler unavailable: {exc}")
    record = build_record(cluster, job_id, job, recoveries, output_progress(job))
    record.notes.extend(notes)
    return account_job(record, now)


async def goodput_report(
    client: Client,
    scheduler: Scheduler | None,
    cluster: str,
    *,
    now: datetime,
    job_id: str | None = None,
    since: datetime | None = None,
) -> GoodputReport:
    """Every job with a recovery since ``since`` (or just ``job_id``), and the total."""
    recoveries = await load_recoveries(client, job_id=job_id, since=since, cluster=cluster)
    by_job: dict[str, list[RecoveryRecord]] = defaultdict(list)
    for recovery in recoveries:
        by_job[recovery.job_id].append(recovery)
    if job_id is not None:
        by_job.setdefault(job_id, [])
    jobs = [
        await job_goodput(scheduler, cluster, jid, records, now)
        for jid, records in sorted(by_job.items(), key=lambda kv: _numeric(kv[0]))
    ]
    return GoodputReport(generated_at=now, since=since, jobs=jobs, cluster=cluster_total(jobs))


def _numeric(job_id: str) -> tuple[int, str]:
    head = job_id.split("_", 1)[0]
    return (int(head) if head.isdigit() else 0, job_id)
