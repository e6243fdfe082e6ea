"""The cluster's measured interruption rate and recovery time, from its accounted jobs.

* Incidents: recoveries whose fault class is in :data:`INTERRUPTION_CLASSES` (faults of the
  infrastructure, or ambiguous between node and code, that a checkpoint interval has to
  absorb). Faults of the job's own code or memory, time limits, preemptions and
  cancellations are not interruptions of this kind and are not counted.
* Exposure: node-hours the accounted jobs ran (wall time times node count), so a job that
  was never interrupted lowers the rate as it should.
* Rate per node-hour ``k / exposure`` with the exact (Garwood) Poisson interval; a job on
  ``n`` nodes sees ``n`` times that rate (nodes fail independently).
* Recovery time: the mean over requeued recoveries of detection + recovery + queue +
  restart to the first step, as accounted.

Below :data:`MIN_INCIDENTS_TO_ADVISE` incidents (the default of the configuration's
``telemetry.advice_min_incidents``) the rate is shown but no interval is advised.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from pydantic import Field

from resurrect.goodput.model import JobGoodput, Model

MIN_INCIDENTS_TO_ADVISE = 5
CONFIDENCE = 0.95
INTERRUPTION_CLASSES = frozenset(
    {
        "gpu.hardware",
        "network.fabric",
        "collective.timeout",
        "node.lost",
        "cuda.error",
        "process.crash",
        "storage.error",
        "job.hang",
        "unknown",
    }
)
RESTART_PARTS = ("detection", "recovery", "queue", "startup")


class RateEstimate(Model):
    """Interruptions per node-hour: the point estimate and its exact Poisson interval."""

    incidents: int = Field(ge=0)
    node_hours: float = Field(ge=0)
    per_node_hour: float | None
    low: float | None
    high: float | None
    confidence: float = CONFIDENCE


class ClusterRates(Model):
    rate: RateEstimate
    by_class: dict[str, int]
    recovery_s: float | None  # mean detect + recover + queue + restart to first step
    recoveries_timed: int
    enough: bool  # at least min_incidents incidents
    min_incidents: int


def _poisson_cdf(k: int, mean: float) -> float:
    """P(X <= k) for X ~ Poisson(mean), summed in log space (no overflow for large k)."""
    if mean <= 0:
        return 1.0
    total = 0.0
    log_term = -mean
    for i in range(k + 1):
        if i:
            log_term += math.log(mean) - math.log(i)
        total += math.exp(log_term)
    return min(1.0, total)


def _solve_mean(k: int, target: float, *, upper: bool) -> float:
    """The Poisson mean where P(X <= k) (``upper``) or P(X >= k) equals ``target``."""
    low, high = 0.0, max(10.0, 4.0 * (k + 10))

    def tail(mean: float) -> float:
        return _poisson_cdf(k, mean) if upper else 1.0 - _poisson_cdf(k - 1, mean)

    # tail is decreasing in the mean for the upper bound, increasing for the lower one
    for _ in range(200):
        middle = (low + high) / 2
        above = tail(middle) > target
        if above == upper:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def garwood_interval(incidents: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact two-sided interval for a Poisson count's mean (Garwood 1936)."""
    alpha = 1.0 - confidence
    low = 0.0 if incidents == 0 else _solve_mean(incidents, alpha / 2, upper=False)
    high = _solve_mean(incidents, alpha / 2, upper=True)
    return low, high


def rate_per_node_hour(incidents: int, node_hours: float) -> RateEstimate:
    """``incidents`` over ``node_hours`` with its exact interval (None without exposure)."""
    if node_hours <= 0:
        return RateEstimate(
            incidents=incidents, node_hours=0.0, per_node_hour=None, low=None, high=None
        )
    low, high = garwood_interval(incidents)
    return RateEstimate(
        incidents=incidents,
        node_hours=round(node_hours, 3),
        per_node_hour=incidents / node_hours,
        low=low / node_hours,
        high=high / node_hours,
    )


def restart_seconds(job: JobGoodput) -> list[float]:
    """What each requeued recovery of ``job`` cost besides lost work (seconds)."""
    return [
        sum(recovery.lost_s.get(part, 0.0) for part in RESTART_PARTS)
        for recovery in job.recoveries
        if recovery.outcome == "recovered"
    ]


def cluster_rates(
    jobs: Sequence[JobGoodput], min_incidents: int = MIN_INCIDENTS_TO_ADVISE
) -> ClusterRates:
    """The interruption rate and the mean recovery time over ``jobs``; ``enough`` when it
    rests on at least ``min_incidents`` incidents."""
    classes: Counter[str] = Counter()
    node_hours = 0.0
    timed: list[float] = []
    for job in jobs:
        if job.nodes is None:
            continue  # exposure unknown: neither its time nor its incidents count
        node_hours += job.wall_s * job.nodes / 3600
        classes.update(
            r.fault_class for r in job.recoveries if r.fault_class in INTERRUPTION_CLASSES
        )
        timed.extend(restart_seconds(job))
    incidents = sum(classes.values())
    return ClusterRates(
        rate=rate_per_node_hour(incidents, node_hours),
        by_class=dict(sorted(classes.items())),
        recovery_s=round(sum(timed) / len(timed), 3) if timed else None,
        recoveries_timed=len(timed),
        enough=incidents >= min_incidents,
        min_incidents=min_incidents,
    )
