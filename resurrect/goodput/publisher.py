"""Goodput as metrics: ``resurrect_job_goodput_ratio`` and ``resurrect_job_lost_seconds`` for
every job with a recent recovery, recomputed every ``telemetry.goodput_interval_s``; with
them each job's checkpoint figures and advice, and the cluster's interruption rate
(:mod:`resurrect.goodput.advice_note`'s shared rates)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.goodput.accounting import lost_by_part
from resurrect.goodput.advice import advise
from resurrect.goodput.advice_note import RATES, cluster_rates_now, newest_recovery
from resurrect.goodput.rates import ClusterRates
from resurrect.goodput.report import GoodputReport, goodput_report
from resurrect.policy import job_policy
from resurrect.scheduler.base import Scheduler
from resurrect.telemetry import metrics as m
from resurrect.telemetry.republish import republish_until

log = logging.getLogger(__name__)


def publish(report: GoodputReport) -> None:
    """Set the per-job gauges from one report."""
    for job in report.jobs:
        labels = {"cluster": job.cluster, "job_id": job.job_id}
        if job.goodput is not None:
            m.JOB_GOODPUT.set(job.goodput, labels)
        for part, seconds in lost_by_part(job).items():
            m.JOB_LOST.set(seconds, {**labels, "part": part})


def publish_advice(report: GoodputReport, cluster: str, rates: ClusterRates) -> None:
    """Set the checkpoint gauges of every job of ``report`` and the cluster's rate."""
    rate = rates.rate
    for bound, value in (("estimate", rate.per_node_hour), ("low", rate.low), ("high", rate.high)):
        if value is not None:
            m.CLUSTER_INTERRUPTION_RATE.set(value, {"cluster": cluster, "bound": bound})
    m.CLUSTER_INTERRUPTION_INCIDENTS.set(rate.incidents, {"cluster": cluster})
    for job in report.jobs:
        labels = {"cluster": job.cluster, "job_id": job.job_id}
        try:
            advice = advise(job, rates)
        except Exception:  # one job's figures cost that job's gauges alone
            log.warning("no checkpoint advice for job %s", job.job_id, exc_info=True)
            continue
        for gauge, value in (
            (m.JOB_SAVE, advice.save_s),
            (m.JOB_CHECKPOINT_INTERVAL, advice.current_interval_s),
            (m.JOB_ADVISED_INTERVAL, advice.advised_interval_s),
        ):
            if value is not None:
                gauge.set(value, labels)
        for interval, ratio in (
            ("current", advice.expected_goodput_now),
            ("advised", advice.expected_goodput_advised),
        ):
            if ratio is not None:
                m.JOB_EXPECTED_GOODPUT.set(ratio, {**labels, "interval": interval})


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
        cluster = self.config.cluster.name
        rates = await RATES.rates(
            cluster,
            lambda: cluster_rates_now(self.client, self.scheduler, self.config, now),
            covering=newest_recovery([r for job in report.jobs for r in job.recoveries]),
        )
        publish_advice(report, cluster, rates)
        return report

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.config.telemetry.goodput_interval_s
        await republish_until(stop, interval, self.publish_once, "goodput")
