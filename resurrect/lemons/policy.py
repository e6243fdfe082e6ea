"""What a recovery does about lemon nodes: the job's ``lemon_action`` applied to its decision
(a pure function; :func:`resurrect.plans.decide.decide` calls it).

* ``flag`` (the default): each lemon the job ran on is named in the recovery's notes, with
  its score and the incidents behind it. Nothing else changes.
* ``exclude``: also, a restarted job is requeued excluding every lemon of the cluster (at
  most :data:`MAX_LEMONS_EXCLUDED`, highest scores first); the requeue step gives them back
  when the job would not fit otherwise (resurrect/operator/exclusions.py).
* ``drain``: also, the job's nodes that are due for draining (``drain_incidents`` distinct
  jobs with independent evidence in the window) are drained: through the drain step, so
  inside the drain budget like every drain, and marked as lemons, so their repair workflow
  keeps them out, flagged for a hardware ticket, instead of returning them after a passing
  health check (an intermittent fault passes checks: that is what makes a lemon).

A decision that does not restart the job (a stop) only gets the notes.
"""

from __future__ import annotations

from collections.abc import Sequence

from resurrect.contracts import LemonAction, RecoveryAction, RecoveryDecision
from resurrect.evidence_trust import match_job_nodes
from resurrect.lemons.models import LemonScore

MAX_LEMONS_EXCLUDED = 32
INCIDENTS_NOTED = 3


def describe(score: LemonScore) -> str:
    """One line: the node, its score, and its latest incidents."""
    latest = "; ".join(
        f"{s.incident.at.isoformat(timespec='seconds')} job {s.incident.job_id}"
        f" {s.incident.kind} ({s.incident.tier.replace('_', ' ')})"
        for s in score.incidents[:INCIDENTS_NOTED]
    )
    due = (
        f", due for draining ({len(score.window_jobs)} jobs in the window)"
        if score.drain_due
        else ""
    )
    return f"{score.node} is a lemon: score {score.score:.2f}{due}; latest: {latest}"


def apply_lemon_policy(
    decision: RecoveryDecision,
    lemons: Sequence[LemonScore],
    action: LemonAction,
    job_nodes: Sequence[str],
) -> RecoveryDecision:
    """``decision`` with ``action`` applied for the ``lemons`` (the cluster's lemon nodes);
    what it did, or would do, is added to the decision's reasons."""
    lemons = [s for s in lemons if s.lemon or s.drain_due]
    if not lemons:
        return decision
    by_node = {s.node: s for s in lemons}
    mine, _ = match_job_nodes(by_node, job_nodes)
    reasons = [*decision.reasons, *(describe(by_node[n]) for n in mine)]
    update: dict[str, object] = {"reasons": reasons}
    if not decision.requeue or action == "flag":
        return decision.model_copy(update=update)
    due = [n for n in mine if by_node[n].drain_due] if action == "drain" else []
    if due:
        update["drain_nodes"] = list(dict.fromkeys([*decision.drain_nodes, *due]))
        update["lemon_nodes"] = due
        update["action"] = RecoveryAction.DRAIN_AND_RESTART
        reasons.append(f"lemon policy drain: drain {', '.join(due)} (within the drain budget)")
    ranked = sorted(lemons, key=lambda s: (-s.score, s.node))[:MAX_LEMONS_EXCLUDED]
    excluded = [s.node for s in ranked if s.node not in decision.exclude_nodes]
    update["exclude_nodes"] = list(dict.fromkeys([*decision.exclude_nodes, *due, *excluded]))
    if excluded:
        reasons.append(f"lemon policy {action}: requeue excluding {', '.join(excluded)}")
    return decision.model_copy(update=update)
