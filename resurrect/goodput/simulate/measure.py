"""The simulator's inputs from a recorded period: the goodput report's accounted jobs.

* jobs: every accounted job with a known goodput and node count; the training it needs is
  the productive time it was measured to keep less the saves in it; its checkpoint interval
  is its measured save spacing minus its save time, else twice its mean recomputed time (a
  fault lands on average half an interval after a save), else :data:`DEFAULT_INTERVAL_S`
  (noted);
* interruption rates per node-hour by fault class: :func:`resurrect.goodput.rates.cluster_rates`;
* detection, recovery, queue and start-up durations: every measured one, drawn with
  replacement;
* the replay (for checking the simulator against the period itself): each recovery's
  attempt running time until the fault, its recomputed work and its measured parts.
"""

from __future__ import annotations

from datetime import datetime

from resurrect.goodput.model import JobGoodput
from resurrect.goodput.rates import INTERRUPTION_CLASSES, cluster_rates
from resurrect.goodput.report import GoodputReport
from resurrect.goodput.simulate.model import (
    PHASES,
    Phase,
    RecordedFault,
    Replay,
    SimInputs,
    SimJob,
)

DEFAULT_INTERVAL_S = 1800.0
_RUNNING_PARTS = frozenset({"startup", "productive", "recompute", "unattributed"})


def job_interval(job: JobGoodput) -> float | None:
    """The job's training between saves, as measured (None: nothing says)."""
    if job.checkpoint_every_s is not None:
        interval = job.checkpoint_every_s - (job.save_s or 0.0)
        if interval > 0:
            return interval
    redone = [r.lost_s.get("recompute", 0.0) for r in job.recoveries]
    mean = sum(redone) / len(redone) if redone else 0.0
    return 2 * mean if mean > 0 else None


def _faults(job: JobGoodput) -> list[RecordedFault]:
    faults: list[RecordedFault] = []
    for recovery in sorted(job.recoveries, key=lambda r: r.attempt):
        if recovery.outcome != "recovered":
            continue
        mine = [s for s in job.segments if s.attempt == recovery.attempt]
        running = 0.0
        for segment in mine:
            if segment.part not in _RUNNING_PARTS:
                break  # detection: the fault
            running += segment.seconds
        lost = recovery.lost_s
        faults.append(
            RecordedFault(
                after_s=running,
                fault_class=recovery.fault_class,
                lost_work_s=lost.get("recompute", 0.0),
                detection_s=lost.get("detection", 0.0),
                recovery_s=lost.get("recovery", 0.0),
                queue_s=lost.get("queue", 0.0),
                next_startup_s=lost.get("startup", 0.0),
            )
        )
    return faults


def inputs_from_report(
    report: GoodputReport,
    *,
    cluster_nodes: int | None = None,
    gpus_per_node: int = 8,
    drain_budget: int = 2,
    drain_window_s: float = 3600.0,
    replay: bool = False,
) -> SimInputs:
    """The recorded period of ``report`` as simulator inputs (``replay``: its own faults)."""
    notes: list[str] = []
    usable = [
        j
        for j in report.jobs
        if j.goodput is not None and j.nodes and j.start and j.parts["productive"].seconds > 0
    ]
    if len(usable) < len(report.jobs):
        notes.append(
            f"{len(report.jobs) - len(usable)} of {len(report.jobs)} jobs left out:"
            " goodput, node count or start unknown"
        )
    starts = [j.start for j in usable if j.start is not None]
    begin: datetime = min(starts) if starts else report.generated_at
    ends = [j.end or report.generated_at for j in usable]
    period_s = max(
        (report.generated_at - report.since).total_seconds() if report.since else 0.0,
        max(((end - begin).total_seconds() for end in ends), default=0.0),
        1.0,
    )
    jobs: list[SimJob] = []
    for job in usable:
        interval = job_interval(job)
        if interval is None:
            notes.append(
                f"job {job.job_id}: checkpoint interval not measured, {DEFAULT_INTERVAL_S:g} s"
            )
        save_s = job.save_s or 0.0
        interval_s = interval or DEFAULT_INTERVAL_S
        jobs.append(
            SimJob(
                job_id=job.job_id,
                nodes=job.nodes or 1,
                submit_s=max(0.0, ((job.start or begin) - begin).total_seconds()),
                # measured productive time goes on across saves: the training is the rest
                work_s=job.parts["productive"].seconds * interval_s / (interval_s + save_s),
                checkpoint_interval_s=interval_s,
                save_s=save_s,
            )
        )
    rates = cluster_rates(usable)
    node_hours = rates.rate.node_hours
    samples: dict[Phase, list[float]] = {phase: [] for phase in PHASES}
    for job in usable:
        for recovery in job.recoveries:
            if recovery.outcome == "recovered" and recovery.fault_class in INTERRUPTION_CLASSES:
                for phase in PHASES:
                    samples[phase].append(recovery.lost_s.get(phase, 0.0))
        first = next((s for s in job.segments if s.part == "startup"), None)
        if first is not None:
            samples["startup"].append(first.seconds)
    return SimInputs(
        cluster_nodes=cluster_nodes or max(1, sum(j.nodes for j in jobs)),
        gpus_per_node=gpus_per_node,
        period_s=period_s,
        jobs=jobs,
        rates_per_node_hour={
            name: count / node_hours for name, count in rates.by_class.items() if node_hours > 0
        },
        samples_s=samples,
        drain_budget=drain_budget,
        drain_window_s=drain_window_s,
        replay=Replay(
            faults={j.job_id: _faults(j) for j in usable},
            first_startup_s={
                j.job_id: next((s.seconds for s in j.segments if s.part == "startup"), 0.0)
                for j in usable
            },
        )
        if replay
        else None,
        notes=notes,
    )
