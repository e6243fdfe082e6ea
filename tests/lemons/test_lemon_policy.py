"""What a recovery does about lemon nodes (resurrect/lemons/policy.py, rule 11 of
resurrect/plans/decide.py), and what a job's comment may ask of it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from support.builders import recovery_context

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    DEFAULT_ACTION,
    Diagnosis,
    Evidence,
    FaultClass,
    Interruption,
    JobInfo,
    JobPolicy,
    JobState,
    LemonAction,
    RecoveryAction,
    RecoveryContext,
    RecoveryDecision,
    SignalKind,
)
from resurrect.lemons.models import LemonRules, LemonScore, NodeIncident
from resurrect.lemons.policy import apply_lemon_policy
from resurrect.lemons.records import known_to_slurm
from resurrect.lemons.score import lemon_score
from resurrect.plans.decide import decide
from resurrect.plans.loader import load_plans
from resurrect.policy import resolve_job_policy

NOW = datetime(2026, 6, 1, tzinfo=UTC)
RULES = LemonRules()
JOB = JobInfo(job_id="9", state=JobState.FAILED, nodes=["gpu-1", "gpu-2"], excluded_nodes=[])


def scored(node: str, jobs: int) -> LemonScore:
    """``node`` with fresh independent incidents of ``jobs`` distinct jobs."""
    incidents = [
        NodeIncident(
            incident=f"recover/c/{j}/0",
            job_id=str(j),
            at=NOW,
            fault_class="gpu.hardware",
            kind="xid",
            tier="independent",
        )
        for j in range(jobs)
    ]
    return lemon_score(node, incidents, [], NOW, RULES)


RESTART = RecoveryDecision(action=RecoveryAction.RESTART, requeue=True, exclude_nodes=["gpu-7"])
STOP = RecoveryDecision(action=RecoveryAction.STOP, requeue=False)


def apply(action: LemonAction, *lemons: LemonScore, decision: RecoveryDecision = RESTART):
    return apply_lemon_policy(decision, lemons, action, JOB.nodes)


def test_a_node_below_the_lemon_score_changes_nothing() -> None:
    for action in ("flag", "exclude", "drain"):
        assert apply(action, scored("gpu-1", 1)) == RESTART


def test_flag_names_the_lemons_the_job_ran_on_in_the_notes_and_changes_nothing_else() -> None:
    decided = apply("flag", scored("gpu-1", 2), scored("gpu-5", 3))
    assert decided.model_copy(update={"reasons": []}) == RESTART
    assert any(r.startswith("gpu-1 is a lemon: score 2.00") for r in decided.reasons)
    assert not any("gpu-5" in r for r in decided.reasons)  # the job did not run there


def test_exclude_requeues_away_from_every_lemon_of_the_cluster() -> None:
    decided = apply("exclude", scored("gpu-1", 2), scored("gpu-5", 3))
    assert decided.exclude_nodes == ["gpu-7", "gpu-5", "gpu-1"]  # highest score first
    assert decided.drain_nodes == [] and decided.action is RecoveryAction.RESTART


def test_drain_drains_the_jobs_nodes_due_for_it_and_marks_them_as_lemons() -> None:
    decided = apply("drain", scored("gpu-1", 3), scored("gpu-2", 2), scored("gpu-5", 3))
    assert decided.action is RecoveryAction.DRAIN_AND_RESTART
    assert decided.drain_nodes == ["gpu-1"] == decided.lemon_nodes  # gpu-2 is not due
    assert decided.exclude_nodes == ["gpu-7", "gpu-1", "gpu-5", "gpu-2"]


def test_a_stop_only_gets_the_notes() -> None:
    decided = apply("drain", scored("gpu-1", 3), decision=STOP)
    assert decided.model_copy(update={"reasons": []}) == STOP
    assert any("gpu-1 is a lemon" in r for r in decided.reasons)


def test_a_comment_may_lower_the_lemon_action_never_raise_it() -> None:
    config = ResurrectConfig.model_validate(
        {"policy": {"partitions": {"gpu": {"enabled": True, "lemon_action": "exclude"}}}}
    )

    def resolved(asked: str) -> tuple[str, list[str]]:
        comment = json.dumps({"resurrect": {"lemon_action": asked}})
        job = JOB.model_copy(update={"comment": comment, "partition": "gpu"})
        resolution = resolve_job_policy(job, config)
        return resolution.policy.lemon_action, resolution.problems

    assert resolved("flag") == ("flag", [])
    assert resolved("exclude") == ("exclude", [])
    action, problems = resolved("drain")
    assert action == "exclude"
    assert "lemon_action 'drain' not granted: at most 'exclude'" in problems[0]


def bundle(action: LemonAction) -> RecoveryContext:
    crash = Interruption(
        cluster="c", job_id="9", restart_count=0, source="test", reason="crash", observed_at=NOW
    )
    return recovery_context(crash, JOB, policy=JobPolicy(lemon_action=action), opted_in=True)


def test_decide_picks_the_drain_plan_when_the_lemon_policy_drains() -> None:
    """A restart whose own evidence drains nothing becomes drain-and-restart for a lemon due."""
    crash = Evidence(kind=SignalKind.JOB_LOG, text="x", role="root")
    diagnosis = Diagnosis(
        fault_class=FaultClass.PROCESS_CRASH,
        action=DEFAULT_ACTION[FaultClass.PROCESS_CRASH],
        confidence=0.9,
        evidence=[crash],
    )
    plans = load_plans([])
    flagged = decide(bundle("flag"), diagnosis, plans, 0, lemons=[scored("gpu-2", 3)])
    assert flagged.plan is not None and flagged.plan.name == "restart-from-checkpoint"
    drained = decide(bundle("drain"), diagnosis, plans, 0, lemons=[scored("gpu-2", 3)])
    assert drained.plan is not None and drained.plan.name == "drain-and-restart"
    assert drained.decision.drain_nodes == ["gpu-2"] == drained.decision.lemon_nodes


def test_lemons_slurm_no_longer_knows_are_not_excluded() -> None:
    gone, here = scored("gpu-9", 3), scored("gpu-5", 3)
    mine = scored("gpu-1", 3)  # the job ran there: Slurm knew it a moment ago
    kept = known_to_slurm([gone, here, mine], JOB.nodes, existing=["gpu-5"])
    assert [s.node for s in kept] == ["gpu-5", "gpu-1"]
    assert apply("exclude", *kept).exclude_nodes == ["gpu-7", "gpu-1", "gpu-5"]
