"""The recovery decision for a diagnosis, taken the way the workflow takes it: by
:func:`resurrect.plans.decide.decide` on a recovery context, with one plan that matches every
action (and may override whether the restart is charged)."""

from __future__ import annotations

from collections.abc import Sequence

from resurrect.contracts import (
    DEFAULT_ACTION,
    Diagnosis,
    Evidence,
    FaultClass,
    JobInfo,
    JobPolicy,
    NodeInfo,
    RecoveryDecision,
    SignalKind,
)
from resurrect.plans.decide import decide
from resurrect.plans.models import ResolvedPlan, WhenSpec
from resurrect.testing.steps import make_step_input


def seen(fault: FaultClass, host: str | None, kind: SignalKind) -> Evidence:
    """One root item of evidence about ``host`` from ``kind``."""
    return Evidence(kind=kind, text="x", role="root", fault_class=fault, host=host)


def diagnosis_of(
    fault: FaultClass,
    hosts: list[str] | None = None,
    *,
    kind: SignalKind = SignalKind.KERNEL_LOG,
    confidence: float = 0.9,
) -> Diagnosis:
    """A diagnosis of ``fault`` naming ``hosts``, its evidence (one root item per host) from
    ``kind``."""
    evidence = [seen(fault, host, kind) for host in (hosts or [None])]
    return Diagnosis(
        fault_class=fault,
        action=DEFAULT_ACTION[fault],
        confidence=confidence,
        culprit_hosts=hosts or [],
        evidence=evidence,
    )


def decision_for(
    diagnosis: Diagnosis,
    job: JobInfo,
    policy: JobPolicy,
    *,
    charged_restarts: int,
    counts_against_budget: bool | None = None,
    nodes: Sequence[NodeInfo] = (),
    lasting: Sequence[str] | None = None,
    reported: Sequence[Evidence] = (),
) -> RecoveryDecision:
    """What :func:`decide` settles for ``diagnosis`` of ``job`` under ``policy``:
    ``nodes`` is the scheduler's view of the job's nodes, ``lasting`` those of them that
    stayed not responding across the recovery's reads (None: not tracked, as in 0.2.0),
    ``reported`` the evidence the sensors sent with their reports, ``counts_against_budget``
    the plan's charge override."""
    incident = make_step_input("recovery.requeue", job=job).bundle
    update = {"policy": policy, "nodes": list(nodes), "lasting_unavailable": lasting}
    bundle = incident.model_copy(update=update)
    every_action = ResolvedPlan(
        name="any",
        source="test",
        when=WhenSpec(),
        counts_against_budget=counts_against_budget,
        steps=[],
    )
    choice = decide(bundle, diagnosis, [every_action], charged_restarts, reported=reported)
    return choice.decision
