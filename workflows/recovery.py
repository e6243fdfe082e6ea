"""RecoveryWorkflow: one per interrupted job attempt.

gather evidence -> attribute -> plan -> drain implicated nodes -> verify checkpoint ->
requeue excluding implicated nodes -> wait until the job runs again -> outcome.

The workflow only decides and orders; every side effect is an activity called by name
(``workflows.names.Activity``), idempotent and retried. In ``observe`` mode the mutating
activities run with ``dry_run`` and report what they would have done. The current phase is
a query (``phase``) and a search attribute (``ResurrectPhase``), so people can follow a
recovery and filter recoveries in the Temporal UI.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from resurrect import search_attributes as sa
    from resurrect.contracts import (
        AttributeRequest,
        ChargedRestartsRequest,
        CheckpointVerdict,
        Contract,
        Diagnosis,
        DrainRequest,
        DrainResult,
        Evidence,
        EvidenceBundle,
        Interruption,
        MutationResult,
        NotifyRequest,
        RecoveryAction,
        RecoveryOutcome,
        RecoveryPlan,
        RequeueRequest,
        VerifyCheckpointRequest,
        WaitRunningRequest,
        WaitRunningResult,
    )
    from resurrect.planning import plan_recovery
    from workflows.names import (
        PHASE_QUERY,
        RECOVERY_WORKFLOW,
        REPORT_SIGNAL,
        STATUS_QUERY,
        Activity,
    )

# Retries for activities that talk to the scheduler: a controller that is down for minutes
# must not fail the recovery, so retry with backoff for a long time; bad input does not retry.
SCHEDULER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=15),
    maximum_attempts=0,
    non_retryable_error_types=["JobNotFound", "NodeNotFound", "SchedulerRefused", "PolicyError"],
)
SCHEDULE_TO_CLOSE = timedelta(minutes=30)
ResultT = TypeVar("ResultT")


class RecoveryWorkflowStatus(Contract):
    """What the ``status`` query returns."""

    phase: str
    fault_class: str | None = None
    drained_nodes: list[str] = []
    notes: list[str] = []


@workflow.defn(name=RECOVERY_WORKFLOW)
class RecoveryWorkflow:
    def __init__(self) -> None:
        self._phase = "reported"
        self._reported: list[Interruption] = []
        self._notes: list[str] = []
        self._fault_class: str | None = None
        self._drained: list[str] = []

    # ------------------------------------------------------------------ signals/queries
    @workflow.signal(name=REPORT_SIGNAL)
    def report(self, interruption: Interruption) -> None:
        """Another sensor saw the same failure: keep its evidence (de-duplicated)."""
        if interruption not in self._reported:
            self._reported.append(interruption)

    @workflow.query(name=PHASE_QUERY)
    def phase(self) -> str:
        return self._phase

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RecoveryWorkflowStatus:
        return RecoveryWorkflowStatus(
            phase=self._phase,
            fault_class=self._fault_class,
            drained_nodes=list(self._drained),
            notes=list(self._notes),
        )

    # ------------------------------------------------------------------ helpers
    def _set_phase(self, phase: str) -> None:
        self._phase = phase
        workflow.upsert_search_attributes([sa.PHASE.value_set(phase)])

    async def _call(
        self,
        name: str,
        arg: object,
        result_type: type[ResultT],
        *,
        timeout_s: float,
        heartbeat_s: float | None = None,
    ) -> ResultT:
        result: ResultT = await workflow.execute_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=timedelta(seconds=timeout_s),
            schedule_to_close_timeout=SCHEDULE_TO_CLOSE,
            heartbeat_timeout=timedelta(seconds=heartbeat_s) if heartbeat_s else None,
            retry_policy=SCHEDULER_RETRY,
        )
        return result

    def _outcome(
        self,
        interruption: Interruption,
        bundle: EvidenceBundle | None,
        diagnosis: Diagnosis | None,
        *,
        outcome: str,
        recovered: bool = False,
        action: RecoveryAction | None = None,
        **extra: object,
    ) -> RecoveryOutcome:
        self._set_phase("done")
        workflow.upsert_search_attributes([sa.OUTCOME.value_set(outcome)])
        fault = diagnosis.fault_class if diagnosis else (interruption.fault_hint or "unknown")
        return RecoveryOutcome.model_validate(
            {
                "workflow_id": workflow.info().workflow_id,
                "cluster": interruption.cluster,
                "job_id": interruption.job_id,
                "restart_count": interruption.restart_count,
                "mode": bundle.mode if bundle else "observe",
                "fault_class": fault,
                "action": action or (diagnosis.action if diagnosis else RecoveryAction.NONE),
                "recovered": recovered,
                "outcome": outcome,
                "diagnosis": diagnosis,
                "drained_nodes": list(self._drained),
                "notes": list(self._notes),
                **extra,
            }
        )

    # ------------------------------------------------------------------ the recovery
    @workflow.run
    async def run(self, interruption: Interruption) -> RecoveryOutcome:
        workflow.logger.info(
            "recovery of job %s attempt %s", interruption.job_id, interruption.restart_count
        )
        self._notes.append(f"reported by {interruption.source}: {interruption.reason}")

        # 1. gather evidence
        self._set_phase("gathering_evidence")
        try:
            bundle = await self._call(
                Activity.GATHER_EVIDENCE, interruption, EvidenceBundle, timeout_s=60
            )
        except ActivityError as err:
            self._notes.append(f"cannot gather evidence: {_cause(err)}")
            return self._outcome(interruption, None, None, outcome="job_unknown")
        self._notes.extend(bundle.policy_problems)
        dry_run = bundle.mode == "observe"
        timeout = bundle.activity_timeout_s

        # 2. attribute (log evidence + scheduler state + what other sensors reported)
        self._set_phase("attributing")
        reported: list[Evidence] = []
        for report in [interruption, *self._reported]:
            for item in report.evidence:
                if item not in reported:
                    reported.append(item)
        diagnosis = await self._call(
            Activity.ATTRIBUTE,
            AttributeRequest(bundle=bundle, reported=reported),
            Diagnosis,
            timeout_s=timeout,
            heartbeat_s=30,
        )
        self._fault_class = diagnosis.fault_class.value
        workflow.upsert_search_attributes([sa.FAULT_CLASS.value_set(diagnosis.fault_class.value)])

        # 3. plan
        self._set_phase("planning")
        charged = await self._call(
            Activity.CHARGED_RESTARTS,
            ChargedRestartsRequest(
                cluster=interruption.cluster,
                job_id=interruption.job_id,
                current_workflow_id=workflow.info().workflow_id,
            ),
            int,
            timeout_s=30,
        )
        plan = plan_recovery(diagnosis, bundle.job, bundle.policy, charged_restarts=charged)
        self._notes.extend(plan.reasons)
        if plan.counts_against_budget and plan.requeue and not dry_run:
            workflow.upsert_search_attributes([sa.BUDGET_CHARGED.value_set(True)])
        nodes = sorted(set(interruption.nodes) | set(bundle.job.nodes) | set(plan.drain_nodes))
        workflow.upsert_search_attributes([sa.NODES.value_set(nodes)])
        would_have: list[str] = []

        if not plan.requeue:
            self._set_phase("notifying")
            await self._call(
                Activity.NOTIFY,
                NotifyRequest(
                    workflow_id=workflow.info().workflow_id,
                    job=bundle.job,
                    policy=bundle.policy,
                    message="; ".join(plan.reasons),
                    dry_run=dry_run,
                ),
                MutationResult,
                timeout_s=timeout,
            )
            outcome = "nothing_to_do" if plan.action is RecoveryAction.NONE else "stopped"
            return self._outcome(
                interruption, bundle, diagnosis, outcome=outcome, action=plan.action
            )

        # 4. isolate
        excluded = list(plan.exclude_nodes)
        if plan.drain_nodes:
            self._set_phase("draining")
            drained = await self._call(
                Activity.DRAIN_NODES,
                DrainRequest(
                    nodes=plan.drain_nodes,
                    reason=f"{diagnosis.fault_class.value} job {interruption.job_id}",
                    incident=workflow.info().workflow_id,
                    dry_run=dry_run,
                ),
                DrainResult,
                timeout_s=timeout,
            )
            self._notes.extend(drained.notes)
            if dry_run:
                would_have.extend(r.detail for r in drained.results)
            else:
                self._drained = list(drained.drained)

        # 5. verify the checkpoint the job will resume from
        self._set_phase("verifying_checkpoint")
        verdict = await self._call(
            Activity.VERIFY_CHECKPOINT,
            VerifyCheckpointRequest(
                job=bundle.job, policy=bundle.policy, level=bundle.checkpoint_level, dry_run=dry_run
            ),
            CheckpointVerdict,
            timeout_s=max(timeout, 600),
            heartbeat_s=60,
        )
        if verdict.note:
            self._notes.append(f"checkpoint: {verdict.note}")
        if (
            verdict.verified
            and verdict.root is not None
            and verdict.latest_valid is None
            and not bundle.policy.allow_restart_from_scratch
        ):
            self._notes.append(
                "no intact checkpoint and the job does not allow a restart from scratch"
            )
            return self._outcome(
                interruption,
                bundle,
                diagnosis,
                outcome="stopped_no_checkpoint",
                action=RecoveryAction.STOP,
                checkpoint=verdict,
            )

        # 6. requeue excluding implicated nodes (holding it first, keeping id and owner)
        self._set_phase("requeuing")
        requeue = await self._call(
            Activity.REQUEUE_JOB,
            RequeueRequest(
                job_id=interruption.job_id,
                exclude_nodes=excluded,
                failed_restart_count=interruption.restart_count,
                dry_run=dry_run,
            ),
            MutationResult,
            timeout_s=timeout,
        )
        self._notes.append(f"requeue: {requeue.detail}")
        if dry_run:
            would_have.append(requeue.detail)
            return self._outcome(
                interruption,
                bundle,
                diagnosis,
                outcome="observed",
                action=plan.action,
                checkpoint=verdict,
                excluded_nodes=excluded,
                would_have=would_have,
            )

        # 7. watch it run again
        self._set_phase("waiting_for_restart")
        waited = await self._call(
            Activity.WAIT_RUNNING,
            WaitRunningRequest(
                job_id=interruption.job_id,
                exclude_nodes=excluded,
                timeout_s=bundle.wait_running_timeout_s,
            ),
            WaitRunningResult,
            timeout_s=bundle.wait_running_timeout_s + 60,
            heartbeat_s=20,
        )
        if waited.note:
            self._notes.append(waited.note)
        return self._outcome(
            interruption,
            bundle,
            diagnosis,
            outcome="recovered" if waited.running else "requeued_not_running",
            recovered=waited.running,
            action=plan.action,
            checkpoint=verdict,
            excluded_nodes=excluded,
            requeued=True,
            job_running_again=waited.running,
        )


def _cause(err: BaseException) -> str:
    cause = err.__cause__
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause or err)


__all__ = ["RecoveryPlan", "RecoveryWorkflow"]
