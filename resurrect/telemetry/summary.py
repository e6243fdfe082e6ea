"""Recoveries as sentences, for the Temporal UI: the workflow's summary at start, its current
details as it goes and when it ends, and a summary per activity.

Pure functions of contracts (deterministic: safe to call from workflow code).
"""

from __future__ import annotations

from typing import Any

from resurrect.contracts import Interruption, RecoveryOutcome, StepInput

MAX_SUMMARY = 400  # Temporal shows summaries on one line; keep them short


def _nodes(names: list[str]) -> str:
    shown = sorted(dict.fromkeys(names))
    if len(shown) > 4:
        return ", ".join(shown[:4]) + f" and {len(shown) - 4} more"
    return ", ".join(shown)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SUMMARY else text[: MAX_SUMMARY - 1] + "…"


def reported_summary(interruption: Interruption) -> str:
    """What a sensor saw, as the workflow's static summary: known at start, never changes."""
    what = interruption.fault_hint.value if interruption.fault_hint else "interruption"
    where = _nodes(interruption.suspect_nodes or interruption.nodes)
    return _cut(
        f"{what} of job {interruption.job_id}"
        + (f" on {where}" if where else "")
        + f" (attempt {interruption.restart_count}), reported by {interruption.source}:"
        f" {interruption.reason}"
    )


def _culprits(outcome: RecoveryOutcome, interruption: Interruption | None) -> list[str]:
    if outcome.diagnosis is not None and outcome.diagnosis.culprit_hosts:
        return outcome.diagnosis.culprit_hosts
    if outcome.drained_nodes:
        return outcome.drained_nodes
    if interruption is not None:
        return interruption.suspect_nodes or interruption.nodes
    return []


def outcome_sentence(
    outcome: RecoveryOutcome, seconds: float, interruption: Interruption | None = None
) -> str:
    """E.g. ``node.lost on node2: drained node2, requeued, running again in 3.4 s``."""
    head = outcome.fault_class.value
    culprits = _culprits(outcome, interruption)
    if culprits:
        head += f" on {_nodes(culprits)}"
    head += f" (job {outcome.job_id})"
    done: list[str] = []
    if outcome.mode == "observe":
        would = "; ".join(outcome.would_have[:3]) or "nothing"
        return _cut(f"{head}: observe mode, would have: {would}")
    if outcome.drained_nodes:
        done.append(f"drained {_nodes(outcome.drained_nodes)}")
    checkpoint = outcome.checkpoint
    if checkpoint is not None and checkpoint.resume_step is not None:
        done.append(f"resumes from step {checkpoint.resume_step}")
    if outcome.requeued:
        done.append("requeued")
    if outcome.recovered:
        done.append(f"running again in {seconds:.1f} s")
    else:
        done.append(f"{outcome.outcome.replace('_', ' ')} after {seconds:.1f} s")
    return _cut(f"{head}: {', '.join(done)}")


def activity_summary(activity: str, args: list[Any]) -> str:
    """One line per activity in the workflow's event history."""
    arg = args[0] if args else None
    if isinstance(arg, StepInput):
        return _cut(_step_summary(activity, arg))
    job = getattr(arg, "job_id", None)
    bundle = getattr(arg, "bundle", None)
    if bundle is not None:
        job = bundle.job.job_id
    fixed = {
        "recovery.gather_evidence": f"gather evidence on job {job}",
        "recovery.assess": f"attribute the fault of job {job}, count its charged restarts",
    }
    return _cut(fixed.get(activity, activity))


def _step_summary(activity: str, step: StepInput) -> str:
    job = step.bundle.job.job_id
    decision = step.decision
    excluded = _nodes([*decision.exclude_nodes, *step.state.drained_nodes])
    texts = {
        "recovery.drain_nodes": f"drain {_nodes(decision.drain_nodes) or 'no nodes'}",
        "recovery.verify_checkpoint": "verify the checkpoint in "
        + (step.bundle.policy.checkpoint_dir or "(no checkpoint_dir)"),
        "recovery.requeue_job": f"requeue job {job}"
        + (f" excluding {excluded}" if excluded else ""),
        "recovery.wait_running": f"wait until job {job} runs again",
        "recovery.notify": f"notify about job {job}",
        "recovery.cancel_job": f"cancel the stuck run of job {job}",
    }
    text = texts.get(activity, f"{activity} (job {job})")
    return text + (" (observe mode)" if step.observe else "")
