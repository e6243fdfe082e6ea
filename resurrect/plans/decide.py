"""Deciding what a recovery does: evidence + diagnosis + plans + budget -> one decision.

:func:`decide` is the one place a recovery's course is chosen: the per-incident
:class:`RecoveryDecision` (restart or not, which nodes to drain and exclude, whether the
restart is charged to the job's budget) and the YAML recovery plan whose steps carry it
out. Pure and deterministic (the workflow calls it directly), so it is tested without
Temporal.

Rules, in order:
1. ``stop`` (application faults: OOM, ordinary exceptions) and ``none`` (a person cancelled
   the job) are final: nothing is drained or requeued.
2. Infrastructure faults (hardware, fabric, node loss, preemption, time limit) do not count
   against the job's restart budget; everything else does. A job whose budget is spent is
   stopped, with the reason recorded.
3. Nodes are drained only for ``drain_and_restart``, and only nodes that the job actually
   ran on (log text may name hosts that are not ours; those are never drained).
4. The job's owner controls every line the job prints. A node is drained, and a restart is
   free, only when a source the job does not control agrees: the node agent (kernel log,
   NVML, heartbeats) or Slurm (the node DOWN / NOT_RESPONDING / drained by someone else,
   the job NODE_FAIL). A diagnosis that rests on job output alone restarts the job without
   draining and is charged to its restart budget, with a note saying why.
5. The requeued job excludes every drained node plus what it already excluded.
6. Drain or restart is one rule (:func:`restart_action`): a restart drains only for a class
   whose default action is ``drain_and_restart`` and only when a culprit is known.
   Attribution proposes with it; rule 3 and 4 then keep only drainable, confirmed nodes.
7. A hang or a straggler names its culprit node from resurrect's own probes (the ranks'
   stacks, who waits for whom, per-GPU clocks). That node is drained, and the restart is
   free, only when the node agent or Slurm has hardware evidence about it (an Xid, ECC, a
   lost GPU, a link, the node down, or the hardware slowing its GPUs down:
   :func:`hardware_evidence`). Without it the job is cancelled and restarted in place,
   charged to its budget: nothing says the node is at fault.
8. A hang culprit node that was also the culprit of hangs of other jobs (within the
   watcher's ``hang_suspect_window_s``: the follower's ``progress.hang_history`` evidence)
   is flagged as a suspect (:attr:`Choice.suspect_nodes`, a note): for an operator to look
   at, never drained on that alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from resurrect.contracts import (
    DEFAULT_ACTION,
    Diagnosis,
    Evidence,
    EvidenceBundle,
    EvidenceSource,
    FaultClass,
    JobInfo,
    JobPolicy,
    NodeInfo,
    RecoveryAction,
    RecoveryDecision,
    SignalKind,
)
from resurrect.plans.models import ResolvedPlan
from resurrect.plans.selection import select_plan
from resurrect.scheduler.base import DRAIN_REASON_PREFIX

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

# Diagnoses that name failing hardware: draining for them needs a second opinion.
SECOND_OPINION_CLASSES = frozenset(
    {FaultClass.GPU_HARDWARE, FaultClass.NETWORK_FABRIC, FaultClass.NODE_LOST}
)
# Sources a job cannot forge: what they say about a node counts as a second opinion.
INDEPENDENT_SOURCES: frozenset[EvidenceSource] = frozenset({"node_agent", "scheduler"})
# Rules of scheduler evidence about the job as a whole (not naming a node).
_JOB_NODE_FAIL_RULE = "scheduler.job_state"
# Classes whose culprit node comes from resurrect's probes of the job (rule 7).
PROBED_CLASSES = frozenset({FaultClass.JOB_HANG, FaultClass.JOB_STRAGGLER})
# Node agent readings of the hardware slowing a GPU down (thermal, power brake): hardware
# evidence for a hang or a straggler although they are only diagnostic on their own.
HARDWARE_SLOWDOWN_RULE_PREFIXES = ("gpu.clocks.",)
# The follower's memory of the jobs a node was the hang culprit of (rule 8).
HANG_HISTORY_RULE = "progress.hang_history"
# A field marking evidence that rests on what the job says about itself (e.g. a GPU paired
# with a rank by the rank's environment): the job's word whoever reported it.
JOB_CONTROLLED_FIELD = "job_controlled"


def evidence_source(evidence: Evidence) -> EvidenceSource:
    """Who vouches for ``evidence``: the job when it is marked job-controlled, else its
    ``source``, else what its kind implies."""
    if JOB_CONTROLLED_FIELD in evidence.fields:
        return "job_output"
    if evidence.source is not None:
        return evidence.source
    if evidence.kind is SignalKind.JOB_LOG:
        return "job_output"
    if evidence.kind is SignalKind.SCHEDULER_STATE:
        return "scheduler"
    return "node_agent"  # kernel log, NVML events and metrics, heartbeats


def independent_evidence(diagnosis: Diagnosis) -> list[Evidence]:
    """The diagnosis' evidence that does not come from the job's own output."""
    return [e for e in diagnosis.evidence if evidence_source(e) in INDEPENDENT_SOURCES]


def corroborated_nodes(
    candidates: Iterable[str], diagnosis: Diagnosis, nodes: Sequence[NodeInfo]
) -> tuple[list[str], list[str]]:
    """Split drain candidates into (confirmed by a second source, job output alone).

    A node is confirmed by root evidence from the node agent or the scheduler naming it, by
    Slurm showing it unavailable (DOWN, NOT_RESPONDING, FAIL) or drained by someone else,
    or by the job ending NODE_FAIL when Slurm names no other node of the job.
    """
    independent = independent_evidence(diagnosis)
    named = {
        e.host.split(".")[0].lower()
        for e in independent
        if e.host and (e.role == "root" or evidence_source(e) == "node_agent")
    }
    by_name = {n.name.split(".")[0].lower(): n for n in nodes}
    troubled = {
        short
        for short, node in by_name.items()
        # a drain of resurrect's own is no second opinion: it may rest on job output itself
        if node.unavailable or (node.drained and not node.reason.startswith(DRAIN_REASON_PREFIX))
    }
    job_node_fail = any(
        e.rule == _JOB_NODE_FAIL_RULE and e.fault_class is FaultClass.NODE_LOST for e in independent
    )
    confirmed: list[str] = []
    alone: list[str] = []
    for name in candidates:
        short = name.split(".")[0].lower()
        if short in named or short in troubled:
            confirmed.append(name)
        elif job_node_fail and not troubled:
            confirmed.append(name)
        else:
            alone.append(name)
    return confirmed, alone


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


def _short(host: str) -> str:
    return host.split(".")[0].lower()


def hardware_evidence(evidence: Iterable[Evidence], host: str) -> list[Evidence]:
    """What the node agent or Slurm says is wrong with ``host``'s hardware (rule 7): root or
    diagnostic findings of a hardware class, or of the hardware slowing a GPU down."""
    return [
        e
        for e in evidence
        if e.host
        and _short(e.host) == _short(host)
        and evidence_source(e) in INDEPENDENT_SOURCES
        and (
            e.fault_class in SECOND_OPINION_CLASSES
            or (e.rule or "").startswith(HARDWARE_SLOWDOWN_RULE_PREFIXES)
        )
    ]


def probed_culprits(diagnosis: Diagnosis) -> list[str]:
    """The nodes a hang's or straggler's probes name: the diagnosis' culprit hosts and the
    hosts of its root evidence of that class."""
    hosts = [
        *diagnosis.culprit_hosts,
        *(
            e.host
            for e in diagnosis.evidence
            if e.host and e.role == "root" and e.fault_class is diagnosis.fault_class
        ),
    ]
    return list(dict.fromkeys(hosts))


def hang_suspects(
    diagnosis: Diagnosis, reported: Sequence[Evidence], job: JobInfo
) -> tuple[list[str], list[str]]:
    """Rule 8: (suspect nodes, notes). A hang culprit node that the follower remembers as
    the culprit of hangs of other jobs."""
    if diagnosis.fault_class is not FaultClass.JOB_HANG:
        return [], []
    culprits, _ = match_job_nodes(probed_culprits(diagnosis), job.nodes)
    suspects: list[str] = []
    notes: list[str] = []
    for node in culprits:
        history = [
            e
            for e in reported
            if e.rule == HANG_HISTORY_RULE and e.host and _short(e.host) == _short(node)
        ]
        others = sorted(
            {j for e in history for j in e.fields.get("jobs", "").split(",") if j} - {job.job_id}
        )
        if not others:
            continue
        suspects.append(node)
        window = history[0].fields.get("window_s", "?")
        notes.append(
            f"node {node} flagged as suspect: also the culprit of hangs of jobs"
            f" {', '.join(others)} within the last {window} s (not drained on that alone;"
            " check its hardware)"
        )
    return suspects, notes


def restart_action(fault_class: FaultClass, culprit_hosts: Sequence[str]) -> RecoveryAction:
    """Drain or restart: ``drain_and_restart`` when the class' default is to drain and a
    culprit host is known, ``restart`` otherwise. Apply it to restarting actions only."""
    if DEFAULT_ACTION[fault_class] is RecoveryAction.DRAIN_AND_RESTART and culprit_hosts:
        return RecoveryAction.DRAIN_AND_RESTART
    return RecoveryAction.RESTART


@dataclass(frozen=True)
class Choice:
    """What :func:`decide` returns: the decision, the plan carrying it out, notes for people."""

    decision: RecoveryDecision
    plan: ResolvedPlan | None
    notes: list[str] = field(default_factory=list)
    # Rule 8: nodes flagged for an operator to look at (not drained for it).
    suspect_nodes: list[str] = field(default_factory=list)


def decide(
    bundle: EvidenceBundle,
    diagnosis: Diagnosis,
    plans: Sequence[ResolvedPlan],
    charged_restarts: int,
    *,
    trust_job_output: bool = False,
    probed_drain: bool = True,
) -> Choice:
    """The decision for one interrupted job attempt and the first plan whose rule matches it.

    Computed once. What does not depend on the restart budget (stop or restart; which nodes
    are drained and excluded) is worked out first, by :func:`_restart`. The budget is
    applied after the plan is known, by :func:`_charge`, because a plan may override
    whether its restart is charged (``counts_against_budget``). The override is folded in
    without a second pass: it changes only the charge, so the only way it can change the
    plan is by spending the budget, which turns the restart into a stop; the plan for
    ``stop`` is then looked up, and its own override cannot matter (a stop requeues
    nothing, so nothing is charged). So at most one more lookup, never a loop.

    ``trust_job_output`` restores the behaviour before rule 4, ``probed_drain=False`` the
    behaviour before rule 7 (a hang or a straggler always restarts in place), only to replay
    recoveries recorded before them.
    """
    job, policy, mode = bundle.job, bundle.policy, bundle.mode
    reported = bundle.interruption.evidence
    restart = _restart(
        diagnosis,
        job.nodes,
        job.excluded_nodes,
        bundle.nodes,
        trust_job_output,
        reported if probed_drain else None,
    )
    decision = _charge(diagnosis, restart, None, charged_restarts, policy, trust_job_output)
    plan = select_plan(plans, diagnosis, decision.action, job, mode)
    override = plan.counts_against_budget if plan is not None else None
    if decision.requeue and override is not None and override != decision.counts_against_budget:
        decision = _charge(diagnosis, restart, override, charged_restarts, policy, trust_job_output)
        if not decision.requeue:  # the plan's charge spent the budget: the plan for stopping
            plan = select_plan(plans, diagnosis, decision.action, job, mode)
    suspects, suspect_notes = hang_suspects(diagnosis, reported, job)
    notes = [*decision.reasons, *suspect_notes]
    if plan is None:
        notes.append(f"no recovery plan matches action {decision.action.value}")
    else:
        notes.append(f"plan '{plan.name}' ({plan.source})")
    return Choice(decision=decision, plan=plan, notes=notes, suspect_nodes=suspects)


def decide_recovery(
    diagnosis: Diagnosis,
    job: JobInfo,
    policy: JobPolicy,
    *,
    charged_restarts: int,
    counts_against_budget: bool | None = None,
    nodes: Sequence[NodeInfo] = (),
    trust_job_output: bool = False,
    reported: Sequence[Evidence] = (),
) -> RecoveryDecision:
    """The decision for one interrupted job attempt under a given charge rule, no plan.

    ``counts_against_budget`` overrides the class default (a recovery plan may say so), but
    never makes a restart that rests on job output alone free. ``nodes``: the scheduler's
    view of the job's nodes (a second opinion on culprits). ``reported``: what the sensor
    that reported the interruption sent with it (hardware readings of a hang's culprit).
    """
    restart = _restart(diagnosis, job.nodes, job.excluded_nodes, nodes, trust_job_output, reported)
    return _charge(
        diagnosis, restart, counts_against_budget, charged_restarts, policy, trust_job_output
    )


def _restart(
    diagnosis: Diagnosis,
    job_nodes: Sequence[str],
    job_excluded: Sequence[str],
    nodes: Sequence[NodeInfo],
    trust_job_output: bool,
    reported: Sequence[Evidence] | None = (),
) -> RecoveryDecision | None:
    """The restart, before the budget (None when the diagnosis stops or does nothing):
    which nodes to drain (rules 3, 4, 7) and exclude (rule 5); ``reasons`` say why.
    ``reported`` None: rule 7 off (replaying recoveries recorded before it)."""
    if diagnosis.action in (RecoveryAction.STOP, RecoveryAction.NONE):
        return None
    reasons: list[str] = []
    drain: list[str] = []
    if diagnosis.fault_class in PROBED_CLASSES and reported is not None and not trust_job_output:
        drain, reasons = _probed_drain(diagnosis, job_nodes, [*diagnosis.evidence, *reported])
    elif diagnosis.action is RecoveryAction.DRAIN_AND_RESTART:
        drain, foreign = match_job_nodes(diagnosis.culprit_hosts, job_nodes)
        reasons.extend(_not_ours(foreign))
        alone: list[str] = []
        if not trust_job_output:
            drain, alone = corroborated_nodes(drain, diagnosis, nodes)
            if alone:
                reasons.append(
                    "not draining "
                    + ", ".join(alone)
                    + ": only the job's output names it; no node agent reading or Slurm node"
                    " state agrees"
                )
        if not drain and not alone:
            reasons.append("no implicated node of this job identified: restart without draining")
    return RecoveryDecision(
        action=RecoveryAction.DRAIN_AND_RESTART if drain else RecoveryAction.RESTART,
        drain_nodes=drain,
        exclude_nodes=list(dict.fromkeys([*job_excluded, *drain])),
        requeue=True,
        reasons=reasons,
    )


def _not_ours(foreign: Sequence[str]) -> list[str]:
    """Rule 3's note: hosts named that the job did not run on are never drained."""
    return (
        ["not draining hosts the job did not run on: " + ", ".join(sorted(foreign))]
        if foreign
        else []
    )


def _probed_drain(
    diagnosis: Diagnosis, job_nodes: Sequence[str], evidence: Sequence[Evidence]
) -> tuple[list[str], list[str]]:
    """Rule 7: (the culprit nodes to drain, reasons) for a hang or a straggler."""
    what = diagnosis.fault_class.value
    culprits, foreign = match_job_nodes(probed_culprits(diagnosis), job_nodes)
    reasons = _not_ours(foreign)
    drain: list[str] = []
    for node in culprits:
        found = hardware_evidence(evidence, node)
        if found:
            drain.append(node)
            reasons.append(
                f"{what} culprit {node} has hardware evidence from the"
                f" {evidence_source(found[0]).replace('_', ' ')}"
                f" ({found[0].rule or found[0].kind.value}: {found[0].text[:200]}): drain it"
            )
        else:
            reasons.append(
                f"{what} culprit {node}: no node agent or Slurm hardware evidence about it:"
                " cancel and restart in place"
            )
    if not culprits:
        reasons.append(f"{what}: no culprit node of this job named: cancel and restart in place")
    return drain, reasons


def _charge(
    diagnosis: Diagnosis,
    restart: RecoveryDecision | None,
    counts_against_budget: bool | None,
    charged_restarts: int,
    policy: JobPolicy,
    trust_job_output: bool,
) -> RecoveryDecision:
    """Rules 1, 2 and 4's charge: the restart charged or free, or a stop (final faults, a
    spent budget). ``counts_against_budget``: a plan's override of the class default."""
    reasons: list[str] = [f"diagnosis: {diagnosis.fault_class.value} -> {diagnosis.action.value}"]
    if restart is None:
        reasons.append(
            "application fault: a restart would fail again; stop and notify"
            if diagnosis.action is RecoveryAction.STOP
            else "nothing to recover"
        )
        return RecoveryDecision(
            action=diagnosis.action, requeue=False, counts_against_budget=False, reasons=reasons
        )
    # rule 7: a hang or a straggler is the job's unless hardware evidence drained its node
    probed_hardware = diagnosis.fault_class in PROBED_CLASSES and bool(restart.drain_nodes)
    counts = (
        diagnosis.fault_class not in FREE_RESTART_CLASSES and not probed_hardware
        if counts_against_budget is None
        else counts_against_budget
    )
    if (
        not counts
        and not trust_job_output
        and not probed_hardware
        and not independent_evidence(diagnosis)
    ):
        counts = True
        reasons.append(
            f"{diagnosis.fault_class.value} rests on the job's own output alone (no node agent"
            " or Slurm evidence): the restart is charged to the job's budget"
        )
    if counts and charged_restarts >= policy.max_restarts:
        reasons.append(
            f"restart budget spent: {charged_restarts} of {policy.max_restarts}"
            " charged restarts used"
        )
        return RecoveryDecision(
            action=RecoveryAction.STOP, requeue=False, counts_against_budget=False, reasons=reasons
        )
    reasons.extend(restart.reasons)
    if counts:
        reasons.append(f"restart charged to budget ({charged_restarts + 1}/{policy.max_restarts})")
    else:
        reasons.append("restart not charged to the job's budget (not the job's fault)")
    return restart.model_copy(update={"counts_against_budget": counts, "reasons": reasons})
