"""Deciding what a recovery does: diagnosis + job + policy + budget -> RecoveryPlan.

Pure and deterministic (the workflow calls it directly), so it is tested without Temporal.

Rules, in order:
1. ``stop`` (application faults: OOM, ordinary exceptions) and ``none`` (a person cancelled
   the job) are final: nothing is drained or requeued.
2. Infrastructure faults (hardware, fabric, node loss, preemption, time limit) do not count
   against the job's restart budget; everything else does. A job whose budget is spent is
   stopped, with the reason recorded.
3. Nodes are drained only for ``drain_and_restart``, and only nodes that the job actually
   ran on (log text may name hosts that are not ours; those are never drained).
4. The requeued job excludes every drained node plus what it already excluded.
"""

from __future__ import annotations

from collections.abc import Iterable

from resurrect.contracts import (
    Diagnosis,
    FaultClass,
    JobInfo,
    JobPolicy,
    RecoveryAction,
    RecoveryPlan,
)

# Faults that are not the job's doing: a restart after them is free.
FREE_RESTART_CLASSES = frozenset(
    {
        FaultClass.GPU_HARDWARE,
        FaultClass.NETWORK_FABRIC,
        FaultClass.NODE_LOST,
        FaultClass.JOB_PREEMPTED,
        FaultClass.JOB_TIME_LIMIT,
    }
)


def match_job_nodes(hosts: Iterable[str], job_nodes: Iterable[str]) -> tuple[list[str], list[str]]:
    """Map host names from evidence onto the job's node names.

    A host matches a node by equal name or equal short name (``gpu-17.cluster`` ~ ``gpu-17``).
    Returns (matched node names, host names that matched no node of the job).
    """
    nodes = list(dict.fromkeys(job_nodes))
    by_short = {node.split(".")[0].lower(): node for node in nodes}
    matched: list[str] = []
    unmatched: list[str] = []
    for host in hosts:
        node = by_short.get(host.split(".")[0].lower())
        if node is None:
            unmatched.append(host)
        elif node not in matched:
            matched.append(node)
    return matched, unmatched


def plan_recovery(
    diagnosis: Diagnosis,
    job: JobInfo,
    policy: JobPolicy,
    *,
    charged_restarts: int,
    counts_against_budget: bool | None = None,
) -> RecoveryPlan:
    """The plan for one interrupted job attempt.

    ``counts_against_budget`` overrides the class default (a recovery plan may say so).
    """
    reasons: list[str] = [f"diagnosis: {diagnosis.fault_class.value} -> {diagnosis.action.value}"]
    counts = (
        diagnosis.fault_class not in FREE_RESTART_CLASSES
        if counts_against_budget is None
        else counts_against_budget
    )

    if diagnosis.action in (RecoveryAction.STOP, RecoveryAction.NONE):
        reasons.append(
            "application fault: a restart would fail again; stop and notify"
            if diagnosis.action is RecoveryAction.STOP
            else "nothing to recover"
        )
        return RecoveryPlan(
            action=diagnosis.action,
            requeue=False,
            counts_against_budget=False,
            reasons=reasons,
        )

    if counts and charged_restarts >= policy.max_restarts:
        reasons.append(
            f"restart budget spent: {charged_restarts} of {policy.max_restarts}"
            " charged restarts used"
        )
        return RecoveryPlan(
            action=RecoveryAction.STOP,
            requeue=False,
            counts_against_budget=False,
            reasons=reasons,
        )

    drain: list[str] = []
    if diagnosis.action is RecoveryAction.DRAIN_AND_RESTART:
        drain, foreign = match_job_nodes(diagnosis.culprit_hosts, job.nodes)
        if foreign:
            reasons.append(
                "not draining hosts the job did not run on: " + ", ".join(sorted(foreign))
            )
        if not drain:
            reasons.append("no implicated node of this job identified: restart without draining")
    exclude = list(dict.fromkeys([*job.excluded_nodes, *drain]))
    if counts:
        reasons.append(f"restart charged to budget ({charged_restarts + 1}/{policy.max_restarts})")
    else:
        reasons.append("restart not charged to the job's budget (not the job's fault)")
    return RecoveryPlan(
        action=RecoveryAction.DRAIN_AND_RESTART if drain else RecoveryAction.RESTART,
        drain_nodes=drain,
        exclude_nodes=exclude,
        requeue=True,
        counts_against_budget=counts,
        reasons=reasons,
    )
