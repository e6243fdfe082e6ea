"""Choosing the plan for a diagnosis: ordered rules, the first that matches wins.

Pure and deterministic: the recovery workflow calls it directly.
"""

from __future__ import annotations

from collections.abc import Sequence

from resurrect.contracts import Diagnosis, JobInfo, RecoveryAction, RecoveryMode
from resurrect.plans.models import ResolvedPlan


def plan_matches(
    plan: ResolvedPlan,
    diagnosis: Diagnosis,
    action: RecoveryAction,
    job: JobInfo,
    mode: RecoveryMode,
) -> bool:
    when = plan.when
    if when.fault_classes is not None and diagnosis.fault_class not in when.fault_classes:
        return False
    if when.actions is not None and action not in when.actions:
        return False
    if diagnosis.confidence < when.min_confidence:
        return False
    has_culprits = bool(diagnosis.culprit_hosts)
    if when.culprit_nodes == "some" and not has_culprits:
        return False
    if when.culprit_nodes == "none" and has_culprits:
        return False
    if when.partitions is not None and job.partition not in when.partitions:
        return False
    return when.modes is None or mode in when.modes


def select_plan(
    plans: Sequence[ResolvedPlan],
    diagnosis: Diagnosis,
    action: RecoveryAction,
    job: JobInfo,
    mode: RecoveryMode,
) -> ResolvedPlan | None:
    for plan in plans:
        if plan_matches(plan, diagnosis, action, job, mode):
            return plan
    return None
