"""Goodput as metrics: ``resurrect_job_goodput_ratio`` and ``resurrect_job_lost_seconds`` for
every job with a recent recovery, recomputed every ``telemetry.goodput_interval_s``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.goodput.accounting import lost_by_part
from resurrect.goodput.report import GoodputReport, goodput_report
from resurrect.policy import job_policy
from resurrect.scheduler.base import Scheduler
from resurrect.telemetry import metrics as m

log = logging.getLogger(__name__)


def publish(report: GoodputReport) -> None:
    """Set the per-job gauges from one report."""
    for job in report.jobs:
        labels = {"cluster": job.cluster, "job_id": job.job_id}
        if job.goodput is not None:
            m.JOB_GOODPUT.set(job.goodput, labels)
        for part, seconds in lost_by_part(job).items():
            m.JOB_LOST.set(seconds, {**labels, "part": part})


class GoodputPublisher:
    def __init__(self, client: Client, scheduler: Scheduler, config: ResurrectConfig) -> None:
        self.client = client
        self.scheduler = scheduler
        self.config = config

    async def publish_once(self) -> GoodputReport:
        now = datetime.now(UTC)
        window = timedelta(seconds=self.config.telemetry.goodput_window_s)
        report = await goodput_report(
            self.client,
            self.scheduler,
            self.config.cluster.name,
            now=now,
            since=now - window,
            opted_in=lambda job: job_policy(job, self.config) is not None,
        )
        publish(report)
        return report

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.config.telemetry.goodput_interval_s
        while not stop.is_set():
            try:
                await self.publish_once()
            except Exception as exc:  # metrics must never stop the service
                log.warning("goodput metrics not updated: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
