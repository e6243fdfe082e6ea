"""crash-loop: a job that breaks its GPU at the same step on every attempt, before it writes
a newer checkpoint; resurrect stops it after ``no_progress_restarts`` restarts.

Rank 1 prints a fatal GPU error at ``fault_after_step`` on every attempt and hangs, and the
node it runs on reports the same failure through its agent (simulated NVML, Xid 48). That is
hardware evidence from a source the job does not control, so each restart is free and the
node is drained (or, over the drain budget, excluded). Every attempt resumes from the same
checkpoint and dies at the same step: no newer checkpoint, no step past the attempt before.
After K such restarts (the policy's ``no_progress_restarts``; the job's comment lowers it to
``DemoSettings.no_progress_restarts``) the next recovery stops the job and notifies, naming
the attempts and their steps. The demo then cancels the hung job, as the notified person
would.

The local cluster gets K + 2 nodes: rank 0 stays on the first, rank 1 lands on a new node
each attempt (the nodes of earlier attempts are excluded).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from resurrect.contracts import (
    JobPolicy,
    JobState,
    RecoveryAction,
    RecoveryOutcome,
)
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.scenarios.base import DETECT_TIMEOUT_S, ENDED, Scenario, say_outcome
from resurrect.demo.scenarios.gpu_error import confirm_on_node, gpu_error_env
from resurrect.demo.stage import DemoSettings, Stage
from resurrect.demo.verify import job_cost
from resurrect.goodput.accounting import lost_by_part
from resurrect.temporal import search_attributes as sa

# What the recovery that stops a restart loop notes first (plans/decide.py: restart_loop).
LOOP_NOTE_PREFIX = "restart loop:"


def no_progress_restarts(settings: DemoSettings) -> int:
    """K: the restarts without progress after which the job is stopped."""
    if settings.no_progress_restarts is not None:
        return settings.no_progress_restarts
    return JobPolicy().no_progress_restarts


class CrashLoop(Scenario):
    name = "crash-loop"
    summary = (
        "every attempt breaks its GPU before a new checkpoint; the job is stopped after"
        " K restarts without progress"
    )
    node_agents = True

    def comment(self, settings: DemoSettings) -> dict[str, Any]:
        if settings.no_progress_restarts is None:
            return {}
        return {"no_progress_restarts": settings.no_progress_restarts}

    def job_env(self, settings: DemoSettings) -> dict[str, str]:
        # every step printed: each attempt's last step is the step it died at
        return {**gpu_error_env(settings, every_attempt=True), "RESURRECT_TRAIN_LOG_EVERY": "1"}

    def cluster_nodes(self, settings: DemoSettings) -> int:
        return max(settings.nodes, no_progress_restarts(settings) + 2)

    def checkpoint_before_fault(self, settings: DemoSettings) -> int | None:
        return None  # the job fails by itself, after its first checkpoint

    async def play(self, stage: Stage, victim: str) -> dict[str, Any]:
        s, say = stage.settings, stage.say
        restarts = no_progress_restarts(s)
        say(
            f"every attempt of job {stage.job_id} reports a fatal GPU error at step"
            f" {s.fault_after_step}; resurrect should stop it after {restarts} restarts"
            " without progress"
        )
        attempts: list[dict[str, Any]] = []
        outcome: RecoveryOutcome | None = None
        first_fault: float | None = None
        for attempt in range(restarts + 2):  # one more than a stop after K restarts needs
            at, host = await stage.wait_gpu_error(count=attempt + 1, timeout=s.timeout_s)
            first_fault = at if first_fault is None else first_fault
            say(f"FAULT (attempt {attempt}): rank 1 on {host} reported a fatal GPU error")
            confirm_on_node(stage, host)
            workflow_id = recovery_workflow_id(stage.cluster.cluster_name, stage.job_id, attempt)
            detected = await stage.wait_workflow_started(workflow_id, timeout=DETECT_TIMEOUT_S)
            say(f"recovery {workflow_id} started {detected - at:.1f} s after the fault")
            handle = stage.client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)
            ended = await asyncio.wait_for(handle.result(), timeout=s.timeout_s)
            say_outcome(stage, ended)
            attempts.append(await _attempt(stage, workflow_id, ended, host, detected - at))
            outcome = ended
            if ended.action is RecoveryAction.STOP or not ended.requeued:
                break
        assert outcome is not None and first_fault is not None
        stopped_at = time.time()
        at_stop = await stage.job()
        # a stopped recovery leaves the hung job to its owner: cancel it, as they would
        await asyncio.to_thread(stage.cluster.run, ["scancel", stage.job_id], check=False)
        final = await stage.wait_job(lambda j: j.state not in ENDED, 60, "the job to end")
        cost = await job_cost(stage)
        stop_reason = next((n for n in outcome.notes if n.startswith(LOOP_NOTE_PREFIX)), None)
        stopped = outcome.action is RecoveryAction.STOP and stop_reason is not None
        say(
            f"restart loop {'STOPPED' if stopped else 'NOT stopped'} after"
            f" {len(attempts) - 1} restarts: {stop_reason or outcome.notes}"
        )
        return {
            "scenario": self.name,
            "scheduler": stage.settings.scheduler,
            "action": outcome.action.value,
            "recovered": outcome.recovered,
            "fault_class": outcome.fault_class.value,
            "recovery_notes": outcome.notes,
            "injected_node": victim,
            "drained_nodes": sorted({n for a in attempts for n in a["drained_nodes"]}),
            "no_progress_restarts": restarts,
            "restarts": len(attempts) - 1,
            "attempts": attempts,
            "loop_stopped": stopped,
            "stop_reason": stop_reason,
            "time_to_detect_s": attempts[0]["time_to_detect_s"],
            "time_to_stop_s": round(stopped_at - first_fault, 2),
            "job_state_at_stop": at_stop.state.value,
            "job_completed": final.state is JobState.COMPLETED,
            "workflow_id": outcome.workflow_id,
            "job_id": stage.job_id,
            "job_restarts": final.restart_count,
            "goodput": cost.goodput,
            "ettr": cost.ettr,
            "lost_s": lost_by_part(cost),
        }

    def succeeded(self, result: dict[str, Any]) -> bool:
        return bool(
            result.get("loop_stopped") and result.get("restarts") == result["no_progress_restarts"]
        )


async def _attempt(
    stage: Stage, workflow_id: str, outcome: RecoveryOutcome, host: str, detect_s: float
) -> dict[str, Any]:
    """One attempt as its recovery recorded it: the last step it printed, the checkpoint step
    the next attempt resumed from, the node its GPU error named, what the recovery did, the
    job incarnation it matched earlier recoveries with."""
    description = await stage.client.get_workflow_handle(workflow_id).describe()
    recorded = description.typed_search_attributes
    return {
        "restart_count": outcome.restart_count,
        "last_step": recorded.get(sa.LAST_STEP),
        "resume_step": recorded.get(sa.RESUME_STEP),
        "gpu_error_node": host,
        "workflow_id": workflow_id,
        "fault_class": outcome.fault_class.value,
        "culprit_hosts": outcome.diagnosis.culprit_hosts if outcome.diagnosis else [],
        "action": outcome.action.value,
        "charged": bool(recorded.get(sa.BUDGET_CHARGED)),
        "incarnation": recorded.get(sa.INCARNATION),
        "drained_nodes": outcome.drained_nodes,
        "excluded_nodes": outcome.excluded_nodes,
        "time_to_detect_s": round(detect_s, 2),
    }
