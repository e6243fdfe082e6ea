"""Checkpoint interval advice for one job: its measured save time, the cluster's measured
interruption rate scaled to its node count, the cluster's measured recovery time, and the
interval that maximises the expected goodput of :mod:`resurrect.goodput.interval`.

The advised interval is given at the rate's point estimate, with the range it spans over the
rate's confidence interval (a higher rate advises a shorter interval). Nothing is advised
when there are fewer than :data:`~resurrect.goodput.rates.MIN_INCIDENTS_TO_ADVISE`
incidents, or when the job's save time or the recovery time was not measured; the note
says which.
"""

from __future__ import annotations

from datetime import datetime

from resurrect.goodput.interval import (
    daly_interval,
    expected_goodput,
    nvidia_interval,
    optimal_interval,
    young_interval,
)
from resurrect.goodput.model import JobGoodput, Model
from resurrect.goodput.rates import ClusterRates, cluster_rates
from resurrect.goodput.render import seconds_text
from resurrect.goodput.report import GoodputReport

FORMULA = (
    "G(tau) = tau / ((exp((tau + Ts)/Tf) - 1) (Tf + Tr)), maximised over tau"
    " (exponential interruptions while running; Tf = 1/(rate per node-hour x nodes))"
)


class JobAdvice(Model):
    cluster: str
    job_id: str
    nodes: int | None
    save_s: float | None  # Ts
    saves_measured: int
    current_interval_s: float | None  # measured spacing of saves minus the save time
    mtbf_s: float | None  # Tf at the point estimate
    rate_per_node_hour: float | None
    rate_low: float | None
    rate_high: float | None
    incidents: int
    recovery_s: float | None  # Tr
    advised_interval_s: float | None
    advised_range_s: tuple[float, float] | None  # over the rate's confidence interval
    expected_goodput_now: float | None
    expected_goodput_advised: float | None
    closed_forms_s: dict[str, float]
    formula: str = FORMULA
    note: str


def advise(job: JobGoodput, rates: ClusterRates) -> JobAdvice:
    """The advice for ``job`` given the cluster's ``rates`` (a note says what is missing)."""
    rate = rates.rate
    current = (
        max(0.0, job.checkpoint_every_s - (job.save_s or 0.0))
        if job.checkpoint_every_s is not None
        else None
    )
    missing = _missing(job, rates)
    if not missing and (job.nodes is None or rate.per_node_hour is None):
        missing = "the job's node count or the exposure is unknown"
    unadvised = JobAdvice(
        cluster=job.cluster,
        job_id=job.job_id,
        nodes=job.nodes,
        save_s=job.save_s,
        saves_measured=job.saves_measured,
        current_interval_s=round(current, 3) if current is not None else None,
        mtbf_s=None,
        rate_per_node_hour=rate.per_node_hour,
        rate_low=rate.low,
        rate_high=rate.high,
        incidents=rate.incidents,
        recovery_s=rates.recovery_s,
        advised_interval_s=None,
        advised_range_s=None,
        expected_goodput_now=None,
        expected_goodput_advised=None,
        closed_forms_s={},
        note=f"no advice: {missing}",
    )
    if missing or job.nodes is None or rate.per_node_hour is None:
        return unadvised
    save_s = job.save_s or 0.0
    recovery_s = rates.recovery_s or 0.0
    mtbf_s = 3600.0 / (rate.per_node_hour * job.nodes)
    advised = optimal_interval(save_s, mtbf_s)
    span = sorted(
        optimal_interval(save_s, 3600.0 / (bound * job.nodes))
        for bound in (rate.low or 0.0, rate.high or 0.0)
        if bound > 0
    )
    now = expected_goodput(current, save_s, mtbf_s, recovery_s) if current else None
    best = expected_goodput(advised, save_s, mtbf_s, recovery_s)
    note = (
        f"save every {seconds_text(advised)} of training (now {_text(current)}):"
        f" expected goodput {_ratio(best)} (now {_ratio(now)}); Ts {seconds_text(save_s)},"
        f" Tf {seconds_text(mtbf_s)} ({rate.incidents} incidents,"
        f" {rate.per_node_hour:.3g}/node-h x {job.nodes} nodes), Tr {seconds_text(recovery_s)}"
    )
    return unadvised.model_copy(
        update={
            "mtbf_s": round(mtbf_s, 3),
            "advised_interval_s": round(advised, 3),
            "advised_range_s": (round(span[0], 3), round(span[-1], 3)) if span else None,
            "expected_goodput_now": round(now, 4) if now is not None else None,
            "expected_goodput_advised": round(best, 4),
            "closed_forms_s": {
                "young": round(young_interval(save_s, mtbf_s), 3),
                "daly": round(daly_interval(save_s, mtbf_s), 3),
                "nvidia": round(nvidia_interval(save_s, mtbf_s, recovery_s), 3),
            },
            "note": note,
        }
    )


def _missing(job: JobGoodput, rates: ClusterRates) -> str:
    if not rates.enough:
        return (
            f"too few incidents to advise ({rates.rate.incidents} < {rates.min_incidents}"
            f" over {rates.rate.node_hours:g} node-hours)"
        )
    if job.save_s is None:
        return "the job's save time was not measured (no checkpoint lines with a zoned time)"
    if rates.recovery_s is None:
        return "no recovery of the cluster was timed to the first step"
    return ""


def _text(seconds: float | None) -> str:
    return "unknown" if seconds is None else seconds_text(seconds)


def _ratio(value: float | None) -> str:
    return "unknown" if value is None else f"{value * 100:.1f}%"


class AdviceReport(Model):
    """The cluster's rates and the advice for each job (or the one asked about)."""

    generated_at: datetime
    since: datetime | None
    rates: ClusterRates
    jobs: list[JobAdvice]


def advice_report(
    report: GoodputReport, job_id: str | None = None, *, min_incidents: int
) -> AdviceReport:
    """Rates over every job of ``report``; advice for ``job_id`` or for every job."""
    rates = cluster_rates(report.jobs, min_incidents)
    return AdviceReport(
        generated_at=report.generated_at,
        since=report.since,
        rates=rates,
        jobs=[advise(job, rates) for job in report.jobs if job_id in (None, job.job_id)],
    )


def advice_lines(advice: AdviceReport) -> list[str]:
    """The advice report for people: the cluster's figures, then one line per job."""
    rate = advice.rates.rate
    if rate.per_node_hour is None:
        lines = ["interruption rate: no node-hours accounted in this window"]
    else:
        lines = [
            f"interruption rate: {rate.per_node_hour:.3g} per node-hour"
            f" ({rate.confidence:.0%} CI {rate.low:.3g}-{rate.high:.3g}) from {rate.incidents}"
            f" incidents in {rate.node_hours:g} node-hours"
            + (f" ({_classes(advice.rates.by_class)})" if advice.rates.by_class else "")
        ]
    lines.append(
        f"recovery time (detect + recover + queue + restart to first step):"
        f" {_text(advice.rates.recovery_s)} (mean of {advice.rates.recoveries_timed})"
    )
    lines.append(f"model: {FORMULA}")
    lines.extend(f"job {job.job_id}: {job.note}" for job in advice.jobs)
    return lines


def _classes(by_class: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in by_class.items())
