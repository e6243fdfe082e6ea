"""When a recovery waits for a person: one place decides (:func:`approval_needed`).

A recovery asks for approval before

* a plan whose ``approval`` says so (before its first step; denied: nothing is done);
* a step marked ``requires_approval: true`` in its plan, or whose code is marked
  ``risky`` (``@step(..., risky=True)``) while ``approvals.risky_steps`` is on;
* a drain of more than ``approvals.drain_nodes_over`` nodes;
* stopping (cancelling) a running job on more than ``approvals.stop_job_nodes_over`` nodes;
* a drain over the drain budget when ``isolation.over_budget: await_approval`` (the drain
  step asks, see ``activities/steps.py``).

A denied step is skipped and the recovery goes on (a denied drain: restart without
draining); a denied plan ends the recovery. Without an answer within the timeout, the
plan's (else the configuration's) ``on_timeout`` applies.
"""

from __future__ import annotations

from typing import Literal

from resurrect.config import ApprovalSettings
from resurrect.contracts import RUNNING_JOB_STATES, JobInfo, RecoveryDecision
from resurrect.plans.models import ResolvedPlan, ResolvedStep

DRAIN_ACTIVITY = "recovery.drain_nodes"
# Steps that stop a running job (cancel it) before it is restarted.
STOPPING_ACTIVITIES = frozenset({"recovery.requeue_job"})


def plan_approval_needed(plan: ResolvedPlan) -> str | None:
    if plan.approval is not None and plan.approval.required:
        return f"plan '{plan.name}' requires approval"
    return None


def approval_needed(
    step: ResolvedStep,
    draft: RecoveryDecision,
    job: JobInfo,
    settings: ApprovalSettings,
) -> str | None:
    """Why ``step`` must wait for a person, or None."""
    if step.requires_approval:
        return f"step {step.activity} of plan '{step.from_plan}' requires approval"
    if step.risky and settings.risky_steps:
        return f"step {step.activity} is marked risky"
    if (
        step.activity == DRAIN_ACTIVITY
        and settings.drain_nodes_over is not None
        and len(draft.drain_nodes) > settings.drain_nodes_over
    ):
        return (
            f"drain of {len(draft.drain_nodes)} nodes ({', '.join(draft.drain_nodes)}) is more"
            f" than approvals.drain_nodes_over={settings.drain_nodes_over}"
        )
    size = job.num_nodes or len(job.nodes)
    if (
        step.activity in STOPPING_ACTIVITIES
        and job.state in RUNNING_JOB_STATES  # a requeue or cancel ends the running attempt
        and settings.stop_job_nodes_over is not None
        and size > settings.stop_job_nodes_over
    ):
        return (
            f"stopping running job {job.job_id} on {size} nodes is more than"
            f" approvals.stop_job_nodes_over={settings.stop_job_nodes_over}"
        )
    return None


def timeout_default(
    plan: ResolvedPlan, settings: ApprovalSettings
) -> tuple[float, Literal["approve", "deny"]]:
    """How long to wait, and what to do without an answer."""
    spec = plan.approval
    timeout_s = spec.timeout_s if spec and spec.timeout_s else settings.timeout_s
    default = spec.on_timeout if spec and spec.on_timeout else settings.on_timeout
    return timeout_s, default
