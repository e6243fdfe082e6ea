"""Deciding what a recovery does: evidence + diagnosis + plans + budget -> one decision.

:func:`decide` is the one place a recovery's course is chosen: the per-recovery
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
   NVML, heartbeats) or Slurm (the node DOWN, NOT_RESPONDING in reads a grace apart,
   drained by someone else, the job NODE_FAIL). A diagnosis that rests on job output alone
   restarts the job without draining and is charged to its restart budget, with a note
   saying why.
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
9. A job whose last ``no_progress_restarts`` restarts made no progress is in a restart loop
   and is stopped, whatever the fault (:func:`restart_loop`).
10. Free restarts are capped per job and window (``free_restarts_per_window``) and over the
    job's life (``max_free_restarts``); beyond either cap a restart is charged to the job's
    budget.
11. Lemon nodes (nodes whose incidents recur across jobs and time) are flagged, or also
    excluded from the requeue, or also drained when due, as the job's ``lemon_action``
    says (:mod:`resurrect.lemons.policy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from resurrect.contracts import (
    AttemptRecord,
    Diagnosis,
    Evidence,
    FaultClass,
    JobInfo,
    JobPolicy,
    RecoveryAction,
    RecoveryContext,
    RecoveryDecision,
    RecoveryMode,
    RestartHistory,
)
from resurrect.contracts.assessment import Assessment
from resurrect.evidence_trust import (
    HANG_HISTORY_RULE,
    PROBED_CLASSES,
    corroborated_nodes,
    evidence_source,
    hardware_evidence,
    independent_evidence,
    match_job_nodes,
    probed_culprits,
    short_name,
    silent_nodes,
)
from resurrect.lemons.models import LemonScore
from resurrect.lemons.policy import apply_lemon_policy
from resurrect.plans.models import ResolvedPlan

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
            if e.rule == HANG_HISTORY_RULE and e.host and short_name(e.host) == short_name(node)
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


@dataclass(frozen=True)
class Choice:
    """What :func:`decide` returns: the decision, the plan carrying it out, notes for people."""

    decision: RecoveryDecision
    plan: ResolvedPlan | None
    notes: list[str] = field(default_factory=list)
    # Rule 8: nodes flagged for an operator to look at (not drained for it).
    suspect_nodes: list[str] = field(default_factory=list)
    # The plans the decision found, one per lookup, in lookup order (:func:`plans_looked_up`)
    found_plans: tuple[ResolvedPlan, ...] = ()


def decide(
    bundle: RecoveryContext,
    diagnosis: Diagnosis,
    plans: Sequence[ResolvedPlan],
    charged_restarts: int,
    *,
    reported: Sequence[Evidence] | None = None,
    history: RestartHistory | None = None,
    lemons: Sequence[LemonScore] = (),
) -> Choice:
    """The decision for one interrupted job attempt and the first plan whose rule matches it.

    ``reported``: the evidence of every report the recovery received (the first report's
    when None), so hardware readings that a node agent sent after the first report weigh as
    much as those sent with it. ``history``: the job's earlier attempts as its recoveries
    recorded them (rules 9 and 10; none known when None). ``lemons``: the cluster's nodes
    with a lemon score, as the assessment read them (rule 11).

    Computed once. What does not depend on the restart budget (stop or restart; which nodes
    are drained and excluded) is worked out first, by :func:`_restart`. The budget is
    applied after the plan is known, by :func:`_charge`, because a plan may override
    whether its restart is charged (``counts_against_budget``). The override is folded in
    without a second pass: it changes only the charge, so the only way it can change the
    plan is by spending the budget, which turns the restart into a stop; the plan for
    ``stop`` is then looked up, and its own override cannot matter (a stop requeues
    nothing, so nothing is charged). So at most one more lookup, never a loop.
    """
    job, policy, mode = bundle.job, bundle.policy, bundle.mode
    if reported is None:
        reported = bundle.interruption.evidence
    restart = _restart(diagnosis, job.nodes, job.excluded_nodes, bundle, reported)
    budget = _Budget(policy, charged_restarts, history or RestartHistory())
    attempt = bundle.interruption.restart_count
    decision = _lemons(_charge(diagnosis, restart, None, budget, attempt), lemons, policy, job)
    plan = select_plan(plans, diagnosis, decision.action, job, mode)
    found: tuple[ResolvedPlan | None, ...] = (plan,)
    override = plan.counts_against_budget if plan is not None else None
    if decision.requeue and override is not None and override != decision.counts_against_budget:
        decision = _charge(diagnosis, restart, override, budget, attempt)
        decision = _lemons(decision, lemons, policy, job)
        if not decision.requeue:  # the plan's charge spent the budget: the plan for stopping
            plan = select_plan(plans, diagnosis, decision.action, job, mode)
            found = (*found, plan)
    suspects, suspect_notes = hang_suspects(diagnosis, reported, job)
    notes = [*decision.reasons, *suspect_notes]
    if plan is None:
        notes.append(f"no recovery plan matches action {decision.action.value}")
    else:
        notes.append(f"plan '{plan.name}' ({plan.source})")
    return Choice(
        decision=decision,
        plan=plan,
        notes=notes,
        suspect_nodes=suspects,
        found_plans=tuple(p for p in found if p is not None),
    )


def decide_assessed(
    bundle: RecoveryContext, assessment: Assessment, reported: Sequence[Evidence]
) -> Choice:
    """:func:`decide` from a recovery's assessment and the evidence of its reports: the one
    call of the workflow, and of ``recovery.assess`` when it picks the plans the assessment
    carries (:func:`plans_looked_up`), so both decide from the same inputs."""
    return decide(
        bundle,
        assessment.diagnosis,
        assessment.plans,
        assessment.charged_restarts,
        reported=reported,
        history=assessment.history,
        lemons=assessment.lemons,
    )


def plans_looked_up(plans: Sequence[ResolvedPlan], choice: Choice) -> list[ResolvedPlan]:
    """The plans among ``plans`` that ``choice`` found, in match order: :func:`decide` over
    them, with the same other inputs, makes the same choice (each lookup's first match is
    among them, and none of them before it matches that lookup). So a recovery's assessment
    carries these, not every plan the worker has."""
    found = {id(p) for p in choice.found_plans}
    return [p for p in plans if id(p) in found]


def _lemons(
    decision: RecoveryDecision, lemons: Sequence[LemonScore], policy: JobPolicy, job: JobInfo
) -> RecoveryDecision:
    """Rule 11: the job's lemon policy applied to the decision."""
    return apply_lemon_policy(decision, lemons, policy.lemon_action, job.nodes)


def _restart(
    diagnosis: Diagnosis,
    job_nodes: Sequence[str],
    job_excluded: Sequence[str],
    bundle: RecoveryContext,
    reported: Sequence[Evidence],
) -> RecoveryDecision | None:
    """The restart, before the budget (None when the diagnosis stops or does nothing):
    which nodes to drain (rules 3, 4, 7) and exclude (rule 5); ``reasons`` say why."""
    if diagnosis.action in (RecoveryAction.STOP, RecoveryAction.NONE):
        return None
    reasons: list[str] = []
    drain: list[str] = []
    quiet: list[str] = []
    if diagnosis.fault_class in PROBED_CLASSES:
        drain, reasons = _probed_drain(diagnosis, job_nodes, [*diagnosis.evidence, *reported])
    elif diagnosis.action is RecoveryAction.DRAIN_AND_RESTART:
        drain, foreign = match_job_nodes(diagnosis.culprit_hosts, job_nodes)
        reasons.extend(_not_ours(foreign))
        drain, alone = corroborated_nodes(
            drain, diagnosis, bundle.nodes, bundle.lasting_unavailable
        )
        silent = silent_nodes(diagnosis)
        quiet = [n for n in alone if short_name(n) in silent]
        printed = [n for n in alone if n not in quiet]
        if printed:
            reasons.append(
                "not draining "
                + ", ".join(printed)
                + ": only the job's output names it; no node agent reading or Slurm node"
                " state agrees"
            )
        if quiet:
            reasons.append(
                "not draining "
                + ", ".join(quiet)
                + ": only its node agent's silence says it is lost (Slurm still sees it);"
                " left out of this job's restart"
            )
        if not drain and not alone:
            reasons.append("no implicated node of this job identified: restart without draining")
    return RecoveryDecision(
        action=RecoveryAction.DRAIN_AND_RESTART if drain else RecoveryAction.RESTART,
        drain_nodes=drain,
        exclude_nodes=list(dict.fromkeys([*job_excluded, *drain, *quiet])),
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


@dataclass(frozen=True)
class _Budget:
    """What a restart is weighed against: the job's policy, the restarts already charged to
    its budget, and its earlier attempts."""

    policy: JobPolicy
    charged_restarts: int
    history: RestartHistory


def _charge(
    diagnosis: Diagnosis,
    restart: RecoveryDecision | None,
    counts_against_budget: bool | None,
    budget: _Budget,
    attempt: int,
) -> RecoveryDecision:
    """Rules 1, 2, 4, 9 and 10's charge: the restart charged or free, or a stop (final faults,
    a restart loop, a spent budget). ``counts_against_budget``: a plan's override of the
    class default; ``attempt``: the restart count of the attempt interrupted."""
    policy, charged_restarts, history = budget.policy, budget.charged_restarts, budget.history
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
    if not counts and not probed_hardware and not independent_evidence(diagnosis):
        counts = True
        reasons.append(
            f"{diagnosis.fault_class.value} rests on the job's own output alone (no node agent"
            " or Slurm evidence): the restart is charged to the job's budget"
        )
    loop = restart_loop(history, attempt, policy)
    if loop is not None:
        reasons.append(loop)
        return RecoveryDecision(
            action=RecoveryAction.STOP, requeue=False, counts_against_budget=False, reasons=reasons
        )
    if not counts and (
        history.free_restarts is not None and history.free_restarts >= policy.max_free_restarts
    ):
        counts = True
        reasons.append(
            f"{history.free_restarts} free restarts in the job's life (at most"
            f" {policy.max_free_restarts}): this restart is charged to the job's budget"
        )
    if not counts and history.read_at is not None:
        used = free_restarts_used(history, policy, history.read_at)
        if used >= policy.free_restarts_per_window:
            counts = True
            reasons.append(
                f"{used} free restarts within the last {policy.free_restart_window_s:g} s"
                f" (at most {policy.free_restarts_per_window}): this restart is charged to"
                " the job's budget"
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


# ---------------------------------------------------------------------------- rules 9 and 10
# An attempt of a job is the run between two interruptions; each recovery records the last
# training step its attempt printed (``last_step``) and the checkpoint step it set the next
# attempt to resume from (``resume_step``). An attempt made progress when it printed a step
# past everything the attempts before it reached, or left a newer checkpoint than the one it
# started from; nothing known about an attempt is not taken as no progress. Printed steps are
# the job's own word, so the assessment asks for progress from verified checkpoints only
# (``RestartHistory.progress_from_checkpoints``): printing a step more per attempt then
# clears nothing, and rule 10 bounds what it gets for free over its whole life.


def attempt_chain(history: RestartHistory, restart_count: int) -> list[AttemptRecord]:
    """The attempts the records know without a gap, oldest first, ending with the one
    interrupted now (attempt ``restart_count``, with the step it printed last, or with
    ``progress_from_checkpoints`` the steps of the checkpoints that verified only)."""
    records = history.earlier
    last_step = history.last_step
    if history.progress_from_checkpoints:
        # a step counts only as a checkpoint that verified; none verified: step 0
        records = [r.model_copy(update={"last_step": r.resume_step or 0}) for r in records]
        reached = max((r.resume_step or 0 for r in records), default=0)
        last_step = max(reached, history.verified_step or 0)
    by_count = {record.restart_count: record for record in records}
    chain = [AttemptRecord(restart_count=restart_count, last_step=last_step)]
    while (earlier := by_count.get(chain[0].restart_count - 1)) is not None:
        chain.insert(0, earlier)
    return chain


def made_progress(attempt: AttemptRecord, earlier: Sequence[AttemptRecord]) -> bool | None:
    """Whether ``attempt`` got further than the ``earlier`` attempts (oldest first): a step
    past the furthest they reached, or a newer checkpoint than the one it started from; None
    when nothing is known about it."""
    if attempt.last_step is None and attempt.resume_step is None:
        return None
    reached = [s for a in earlier for s in (a.last_step, a.resume_step) if s is not None]
    if attempt.last_step is not None and attempt.last_step > max(reached, default=-1):
        return True
    started = earlier[-1].resume_step if earlier else None
    started_from = -1 if started is None else started
    return attempt.resume_step is not None and attempt.resume_step > started_from


def restart_loop(history: RestartHistory, restart_count: int, policy: JobPolicy) -> str | None:
    """Rule 9: why the job is in a restart loop (its last ``no_progress_restarts`` restarts
    made no progress, each attempt named with its steps); None when it is not."""
    restarts = policy.no_progress_restarts
    chain = attempt_chain(history, restart_count)
    if len(chain) < restarts + 1:
        return None
    first = len(chain) - restarts
    if any(made_progress(chain[i], chain[:i]) is not False for i in range(first, len(chain))):
        return None
    window = chain[first - 1 :]
    if history.progress_from_checkpoints:
        steps = "; ".join(
            f"attempt {a.restart_count}: newest verified checkpoint step {a.last_step}"
            for a in window
        )
        return (
            f"restart loop: the last {restarts} restarts made no progress (no newer checkpoint"
            f" that verified; printed steps do not count): {steps}; stop and notify"
        )
    steps = "; ".join(
        f"attempt {a.restart_count}: last step {_step(a.last_step)},"
        f" checkpoint {_step(a.resume_step) if a is not chain[-1] else 'not yet read'}"
        for a in window
    )
    return (
        f"restart loop: the last {restarts} restarts made no progress (no step past the"
        f" attempt before, no newer checkpoint): {steps}; stop and notify"
    )


def free_restarts_used(history: RestartHistory, policy: JobPolicy, now: datetime) -> int:
    """Rule 10: the free restarts the job had within ``free_restart_window_s`` before
    ``now``."""
    since = now - timedelta(seconds=policy.free_restart_window_s)
    return sum(
        1
        for record in history.earlier
        if record.requeued
        and not record.charged
        and record.closed_at is not None
        and record.closed_at >= since
    )


def _step(step: int | None) -> str:
    return "?" if step is None else str(step)


# ---------------------------------------------------------------------------- the plan
def plan_matches(
    plan: ResolvedPlan,
    diagnosis: Diagnosis,
    action: RecoveryAction,
    job: JobInfo,
    mode: RecoveryMode,
) -> bool:
    """Whether the plan's ``when`` holds for this diagnosis, action, job and mode."""
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
    """The plan for a decision: the plans' rules in order, the first that matches wins."""
    for plan in plans:
        if plan_matches(plan, diagnosis, action, job, mode):
            return plan
    return None
