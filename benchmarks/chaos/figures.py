"""The soak's figures, drawn from its :class:`History`: faults by kind; the shares detected,
recovered and correctly left alone; time to detect and to recover (p50, p95) by kind; false
drains; lost jobs; goodput of the jobs faults hit against the same shapes of job that no
fault hit, in the same soak."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from .faults import BY_NAME
from .history import FaultRecord, History, Recovery
from .invariants import NoFalseDrain, OptedInJobsEndWell


def percentile(values: Sequence[float], share: float) -> float | None:
    """The ``share`` percentile (nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(share * len(ordered) + 0.5) - 1))
    return round(ordered[rank], 2)


def answering_recovery(history: History, fault: FaultRecord) -> Recovery | None:
    """The first recovery of a job the fault hit that started after the fault."""
    found = [
        r
        for job_id in fault.affected_jobs
        for r in history.recoveries_of(job_id)
        if r.started_at >= fault.at
    ]
    return min(found, key=lambda r: r.started_at) if found else None


def submitted_after(history: History, answer: Recovery, fault: FaultRecord) -> bool:
    """The answering recovery's job was submitted after the fault: no job of the fault's was
    running there any more, and Slurm placed this one on the faulted node before it knew."""
    job = history.job(answer.job_id)
    return job is not None and job.submitted_at > fault.at


def in_flight(history: History, fault: FaultRecord) -> list[Recovery]:
    """The recoveries of the hit job in flight when the fault came: started, and its job not
    running again yet (nor the recovery closed)."""
    if fault.job_id is None:
        return []
    return [
        r
        for r in history.recoveries_of(fault.job_id)
        if r.started_at <= fault.at
        and ((ends := r.running_again_at or r.closed_at) is None or ends > fault.at)
    ]


def draining_already(history: History, fault: FaultRecord) -> Recovery | None:
    """A recovery of the hit job in flight when the fault came that drains the faulted node:
    the node was on its way out before the fault, so no later recovery answers the fault and
    there is no time to detect it."""
    if fault.node is None:
        return None
    return next((r for r in in_flight(history, fault) if fault.node in r.drained_nodes), None)


def in_flight_answer(history: History, fault: FaultRecord) -> Recovery | None:
    """A recovery of the hit job in flight when the fault came: the fault landed on an
    attempt whose recovery was already running (a second fault is injected so; an exception
    the job printed can reach the log follower before the soak stamps its injection), which
    takes it in: no later recovery answers it, and there is no time to detect it."""
    return next(iter(in_flight(history, fault)), None)


def figures(history: History) -> dict[str, Any]:
    injected = [f for f in history.faults if f.skipped is None]
    by_kind: Counter[str] = Counter(f.kind for f in injected)
    skipped: Counter[str] = Counter(f.kind for f in history.faults if f.skipped is not None)
    detect: dict[str, list[float]] = defaultdict(list)
    placed_after: dict[str, list[float]] = defaultdict(list)  # submitted_after
    recover: dict[str, list[float]] = defaultdict(list)
    fence: dict[str, list[float]] = defaultdict(list)
    out_already: Counter[str] = Counter()  # hit a node a recovery in flight was draining
    in_flight: Counter[str] = Counter()  # answered by the hit job's recovery already open
    should_detect = detected = should_recover = recovered = alone_due = alone = 0
    for fault in injected:
        kind = BY_NAME[fault.kind]
        needs_answer = kind.expect in ("recover", "stop")
        if needs_answer and draining_already(history, fault) is not None:
            should_detect += 1
            detected += 1
            out_already[fault.kind] += 1
            continue
        answer = answering_recovery(history, fault)
        if needs_answer:
            should_detect += 1
            if answer is not None:
                detected += 1
                timing = placed_after if submitted_after(history, answer, fault) else detect
                timing[fault.kind].append(answer.started_at - fault.at)
            elif in_flight_answer(history, fault) is not None:
                detected += 1
                in_flight[fault.kind] += 1
        # (a fault that needs no recovery ends its node's watch early: nothing to fence)
        gone = old_ranks_gone_after(history, fault) if kind.expect == "recover" else None
        if gone is not None:
            fence[fault.kind].append(gone)
        if kind.expect == "recover":
            should_recover += 1
            if answer is not None and answer.outcome == "recovered":
                recovered += 1
                if answer.running_again_at is not None:
                    recover[fault.kind].append(answer.running_again_at - answer.started_at)
        if kind.expect == "left_alone":
            alone_due += 1
            job = history.job(fault.job_id or "")
            touched = (
                job is None
                or job.restart_count > 0
                or any(
                    r.requeued or r.drained_nodes for r in history.recoveries_of(fault.job_id or "")
                )
            )
            alone += 0 if touched else 1
    lost = [v for v in OptedInJobsEndWell().check(history) if "lost job" in v or "not ended" in v]
    return {
        "faults_by_kind": dict(sorted(by_kind.items())),
        "skipped_by_kind": dict(sorted(skipped.items())),
        "detected_share": _share(detected, should_detect),
        "recovered_share": _share(recovered, should_recover),
        "left_alone_share": _share(alone, alone_due),
        "detect_s": {k: _p50_p95(v) for k, v in sorted(detect.items())},
        # faults answered first by the recovery of a job submitted after the fault, which
        # Slurm started on the faulted node before it knew (the hit job had just ended):
        # fault -> that recovery, Slurm's own detection; not in detect_s
        "detect_after_placement_s": {k: _p50_p95(v) for k, v in sorted(placed_after.items())},
        # faults on a node an in-flight recovery of the hit job was already draining: detected
        # (the node is out), neither timed nor recovered on their own
        "on_a_node_already_draining": dict(sorted(out_already.items())),
        # faults taken in by the hit job's recovery already open (in_flight_answer): detected,
        # not timed
        "answered_in_flight": dict(sorted(in_flight.items())),
        "recover_s": {k: _p50_p95(v) for k, v in sorted(recover.items())},
        # fault -> no live rank of the hit job's attempt left on the faulted node (fenced by
        # its agent, killed by Slurm, or dead with the host), hosts in namespaces only
        "fence_s": {k: _p50_p95(v) for k, v in sorted(fence.items())},
        # attempts ended by an earlier attempt's srun (leftovers.py): Slurm's step numbers
        "attempts_ended_by_leftovers": sum(len(j.leftover_cancellations) for j in history.jobs),
        "false_drains": len(NoFalseDrain().check(history)),
        "lost_jobs": len(lost),
        **goodput_figures(history),
    }


def old_ranks_gone_after(history: History, fault: FaultRecord) -> float | None:
    """Seconds from ``fault`` to the first sample after it with no live rank of the hit job's
    attempt (as of the fault) on the faulted node (a node with no live rank is absent from
    the census); None when no sample came after it or the job had no sample before it."""
    if fault.node is None or fault.job_id is None:
        return None
    before = [s for s in history.samples if s.at <= fault.at and fault.job_id in s.jobs]
    if not before:
        return None
    attempt = max(before, key=lambda s: s.at).jobs[fault.job_id].restarts
    for sample in sorted(history.samples, key=lambda s: s.at):
        if sample.at <= fault.at:
            continue
        ranks = sample.faulted_node_ranks.get(fault.node, [])
        if not [r for r in ranks if r[0] == fault.job_id and r[1] <= attempt]:
            return round(sample.at - fault.at, 2)
    return None


def goodput_figures(history: History) -> dict[str, Any]:
    """Productive share of wall time, summed over the opted-in jobs faults hit, and over the
    opted-in jobs of the same shapes that no fault hit (the fault-free baseline)."""
    hit = {f_job for f in history.faults if f.skipped is None for f_job in f.affected_jobs}
    sums: dict[str, list[float]] = {"faulted": [0.0, 0.0], "fault_free": [0.0, 0.0]}
    for g in history.goodput:
        job = history.job(g.job_id)
        if job is None or not job.opted_in:
            continue
        group = sums["faulted" if g.job_id in hit else "fault_free"]
        group[0] += g.parts.get("productive", 0.0)
        group[1] += g.wall_s
    faulted = sums["faulted"][0] / sums["faulted"][1] if sums["faulted"][1] else None
    free = sums["fault_free"][0] / sums["fault_free"][1] if sums["fault_free"][1] else None
    return {
        "goodput_faulted_jobs": round(faulted, 4) if faulted is not None else None,
        "goodput_fault_free_jobs": round(free, 4) if free is not None else None,
        "goodput_ratio": round(faulted / free, 4) if faulted is not None and free else None,
    }


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _p50_p95(values: list[float]) -> dict[str, float | int | None]:
    return {"n": len(values), "p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}
