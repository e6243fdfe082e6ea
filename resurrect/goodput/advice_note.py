"""The checkpoint advice line a recovery adds to its notes once the job runs again.

The job's own figures (its save time, from its output) are read for this job only. The
cluster's figures (interruption rate, recovery time) need every accounted job of the last
:data:`RATES_WINDOW_S` (at most :data:`RATES_RECOVERIES_READ` recoveries): a
:class:`RatesCache` keeps them per cluster and process, computed again in the background
(one computation at a time) once they are :data:`RATES_REFRESH_S` old. A recovery reads the
kept rates at once, whatever the recoveries in flight: a 30-day rate moves little with one
more recovery, and a burst of recoveries that each recomputed them would read hundreds of
histories apiece. Only a process that has none yet waits for the first computation. The
note waits at most :data:`ADVICE_DEADLINE_S`; a failure or a timeout of any kind gives a note
saying so, never a failed step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo
from resurrect.goodput.advice import advise
from resurrect.goodput.history import load_recoveries
from resurrect.goodput.model import RecoveryCost
from resurrect.goodput.rates import ClusterRates, cluster_rates
from resurrect.goodput.report import goodput_report, job_goodput
from resurrect.policy import job_policy
from resurrect.scheduler.base import Scheduler

ADVICE_DEADLINE_S = 20.0
RATES_REFRESH_S = 600.0
RATES_WINDOW_S = 30 * 86400.0
RATES_RECOVERIES_READ = 500
PREFIX = "checkpoint advice: "


class RatesCache:
    """The cluster's rates, kept and computed again in the background once older than
    ``refresh_s`` (callers get the kept ones meanwhile). One computation at a time per
    cluster, in its own task: a caller that stops waiting for the first one (its deadline)
    does not cancel it, and the next caller gets its result."""

    def __init__(
        self, refresh_s: float = RATES_REFRESH_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.refresh_s = refresh_s
        self._clock = clock
        self._kept: dict[str, tuple[float, datetime, ClusterRates]] = {}
        self._running: dict[str, asyncio.Task[ClusterRates]] = {}
        self.computations = 0

    async def rates(
        self,
        cluster: str,
        compute: Callable[[], Awaitable[ClusterRates]],
        *,
        covering: datetime | None = None,
    ) -> ClusterRates:
        """The kept rates of ``cluster`` (a computation started when they are stale); the
        first computation's result when none are kept yet. With ``covering`` (the metrics
        publisher, once per interval; never a recovery), rates computed before it are
        computed again and waited for."""
        kept = self._kept.get(cluster)
        behind = kept is not None and covering is not None and covering > kept[1]
        if kept is not None and not behind and self._clock() - kept[0] < self.refresh_s:
            return kept[2]
        task = self._running.get(cluster)
        if task is None:
            task = asyncio.create_task(self._compute(cluster, compute))
            task.add_done_callback(_retrieve)  # a failure nobody waited for is not logged
            self._running[cluster] = task
        if kept is not None and not behind:
            return kept[2]  # stale: the computation under way replaces them
        return await asyncio.shield(task)

    def cancel(self) -> None:
        """Stop every computation under way (the process is stopping)."""
        for task in self._running.values():
            task.cancel()

    async def _compute(
        self, cluster: str, compute: Callable[[], Awaitable[ClusterRates]]
    ) -> ClusterRates:
        started, computed_at = self._clock(), datetime.now(UTC)
        self.computations += 1
        try:
            fresh = await compute()
        finally:
            del self._running[cluster]
        self._kept[cluster] = (started, computed_at, fresh)
        return fresh


def _retrieve(task: asyncio.Task[ClusterRates]) -> None:
    if not task.cancelled():
        task.exception()


RATES = RatesCache()


def newest_recovery(recoveries: Sequence[RecoveryCost]) -> datetime | None:
    """When the newest of ``recoveries`` started or ended (None: none known): rates computed
    before then do not count it, or not whole."""
    times = [t for r in recoveries for t in (r.started_at, r.closed_at) if t is not None]
    return max(times, default=None)


async def cluster_rates_now(
    client: Client, scheduler: Scheduler, config: ResurrectConfig, now: datetime
) -> ClusterRates:
    """Rates over every opted-in job and every job recovered in the window."""
    report = await goodput_report(
        client,
        scheduler,
        config.cluster.name,
        now=now,
        since=now - timedelta(seconds=RATES_WINDOW_S),
        opted_in=lambda job: job_policy(job, config) is not None,
        recoveries_read=RATES_RECOVERIES_READ,
    )
    return cluster_rates(report.jobs, config.telemetry.advice_min_incidents)


def not_computed_note(deadline_s: float) -> str:
    """The note of an advice not computed within its deadline."""
    return f"{PREFIX}not computed within {deadline_s:g} s"


async def advice_note(
    client: Client,
    scheduler: Scheduler,
    config: ResurrectConfig,
    job: JobInfo,
    *,
    cache: RatesCache = RATES,
    deadline_s: float = ADVICE_DEADLINE_S,
) -> str:
    """One line for the recovery's notes: the advice, or why there is none."""
    now = datetime.now(UTC)
    cluster = config.cluster.name
    try:
        async with asyncio.timeout(deadline_s):
            recoveries = await load_recoveries(client, job_id=job.job_id, cluster=cluster, job=job)
            mine = await job_goodput(scheduler, cluster, job.job_id, recoveries, now, job=job)
            rates = await cache.rates(
                cluster, lambda: cluster_rates_now(client, scheduler, config, now)
            )
        return PREFIX + advise(mine, rates).note
    except TimeoutError:
        return not_computed_note(deadline_s)
    except Exception as exc:  # any failure (the job's own data included) is a note
        return f"{PREFIX}unavailable ({exc.__class__.__name__}: {str(exc)[:200]})"
