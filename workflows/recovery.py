"""RecoveryWorkflow: one per interrupted job attempt.

gather evidence -> attribute -> plan -> run the chosen recovery plan's steps (by default:
drain implicated nodes -> verify checkpoint -> requeue excluding them -> wait until the job
runs again) -> outcome.

The workflow decides and orders; every side effect is an activity called by name. Which
steps run is data: the first recovery plan (``resurrect/plans``) whose rule matches the
diagnosis. Each step gets a :class:`StepInput` and returns a :class:`StepResult` that is
folded into the incident state. In ``observe`` mode the steps run with ``dry_run`` and
report what they would have done. The phase (the step running) is a query (``phase``) and
a search attribute (``ResurrectPhase``), so people can follow and filter recoveries in
the Temporal UI.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from resurrect import search_attributes as sa
    from resurrect.config import ApprovalSettings
    from resurrect.contracts import (
        AttributeRequest,
        ChargedRestartsRequest,
        Contract,
        Diagnosis,
        Evidence,
        EvidenceBundle,
        IncidentState,
        Interruption,
        RecoveryAction,
        RecoveryOutcome,
        RecoveryPlan,
        StepInput,
        StepResult,
    )
    from resurrect.operator.approvals import (
        approval_needed,
        plan_approval_needed,
        timeout_default,
    )
    from resurrect.operator.models import (
        APPROVAL_NEEDED_KEY,
        DROPPED_EXCLUSIONS_KEY,
        ApprovalDecision,
        ApprovalInput,
    )
    from resurrect.planning import plan_recovery
    from resurrect.plans.models import ResolvedPlan, ResolvedStep
    from resurrect.plans.selection import select_plan
    from workflows.approval_gate import ApprovalGate, describe
    from workflows.names import (
        APPROVE_UPDATE,
        DENY_UPDATE,
        PHASE_QUERY,
        RECOVERY_WORKFLOW,
        REPORT_SIGNAL,
        STATUS_QUERY,
        Activity,
        OperatorActivity,
    )

# Retries of the evidence activities, which talk to the scheduler: a controller that is down
# for minutes must not fail the recovery; errors that cannot get better do not retry.
SCHEDULER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=15),
    maximum_attempts=0,
    non_retryable_error_types=["JobNotFound", "NodeNotFound", "SchedulerRefused", "PolicyError"],
)
SCHEDULE_TO_CLOSE = timedelta(minutes=30)
ResultT = TypeVar("ResultT")
# A step whose plan sets no heartbeat timeout is retried on another worker this soon after
# its worker died (the step wrapper heartbeats for it).
WORKER_LIVENESS_S = 10.0
# Behaviour changes guarded by workflow.patched(), so recoveries recorded before them
# replay unchanged: the workflow refuses a job that is not opted in; a node is drained (and
# a restart free) only when a source the job does not control agrees.
OPT_IN_PATCH = "refuse-not-opted-in"
SECOND_SOURCE_PATCH = "second-source-for-drain"
# Operator control: approvals (the settings activity, the gates), see workflows/approval_gate.
OPERATOR_PATCH = "operator-control-approvals"


class RecoveryWorkflowStatus(Contract):
    """What the ``status`` query returns."""

    phase: str
    plan: str | None = None
    fault_class: str | None = None
    state: IncidentState = IncidentState()
    notes: list[str] = []
    awaiting_approval: str | None = None  # what a person is asked to approve
    approvals: list[ApprovalDecision] = []


def _phase_of(activity_name: str) -> str:
    namespace, _, name = activity_name.partition(".")
    return name if namespace == "recovery" else activity_name


def _retry_policy(step: ResolvedStep) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=step.retry.initial_interval_s),
        backoff_coefficient=step.retry.backoff,
        maximum_interval=timedelta(seconds=step.retry.max_interval_s),
        maximum_attempts=step.retry.max_attempts,
        non_retryable_error_types=[
            "PermanentStepError",
            "JobNotFound",
            "NodeNotFound",
            "SchedulerRefused",
        ],
    )


def _fold(state: IncidentState, result: StepResult) -> IncidentState:
    update: dict[str, object] = {}
    if result.drained_nodes:
        update["drained_nodes"] = list(dict.fromkeys([*state.drained_nodes, *result.drained_nodes]))
    if result.excluded_nodes:
        # exclusions resurrect gave back (resurrect/operator/exclusions.py) leave the list
        given_back = set(result.data.get(DROPPED_EXCLUSIONS_KEY) or [])
        update["excluded_nodes"] = [
            n
            for n in dict.fromkeys([*state.excluded_nodes, *result.excluded_nodes])
            if n not in given_back
        ]
    if result.requeued is not None:
        update["requeued"] = result.requeued
    if result.running_again is not None:
        update["running_again"] = result.running_again
    if result.checkpoint is not None:
        update["checkpoint"] = result.checkpoint
    return state.model_copy(update=update)


def _cause(err: BaseException) -> str:
    cause = err.__cause__
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause or err)


@workflow.defn(name=RECOVERY_WORKFLOW)
class RecoveryWorkflow:
    def __init__(self) -> None:
        self._phase = "reported"
        self._reported: list[Interruption] = []
        self._notes: list[str] = []
        self._fault_class: str | None = None
        self._plan_name: str | None = None
        self._state = IncidentState()
        self._gate = ApprovalGate()

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
            plan=self._plan_name,
            fault_class=self._fault_class,
            state=self._state,
            notes=list(self._notes),
            awaiting_approval=self._gate.waiting_for,
            approvals=list(self._gate.decisions),
        )

    # ------------------------------------------------------------------ approvals
    @workflow.update(name=APPROVE_UPDATE)
    def approve(self, given: ApprovalInput) -> str:
        """A person approves what the recovery waits for (``resurrect approve``)."""
        return self._gate.answer(True, given)

    @approve.validator
    def _validate_approve(self, given: ApprovalInput) -> None:
        self._gate.validate()

    @workflow.update(name=DENY_UPDATE)
    def deny(self, given: ApprovalInput) -> str:
        """A person denies what the recovery waits for (``resurrect deny``)."""
        return self._gate.answer(False, given)

    @deny.validator
    def _validate_deny(self, given: ApprovalInput) -> None:
        self._gate.validate()

    async def _ask(self, what: str, plan: ResolvedPlan, settings: ApprovalSettings) -> bool:
        """Wait in phase ``awaiting_approval`` for a person (or the timeout's default)."""
        timeout_s, default = timeout_default(plan, settings)
        previous = self._phase
        self._set_phase("awaiting_approval")
        self._notes.append(f"awaiting approval: {what} (default after {timeout_s:g} s: {default})")
        decision = await self._gate.wait(what, timeout_s, default)
        self._notes.append(describe(decision))
        self._set_phase(previous)
        return decision.approved

    async def _execute_step(self, step: ResolvedStep, step_input: StepInput) -> StepResult:
        result: StepResult = await workflow.execute_activity(
            step.activity,
            step_input,
            result_type=StepResult,
            start_to_close_timeout=timedelta(seconds=step.timeout_s),
            schedule_to_close_timeout=timedelta(seconds=step.deadline_s),
            heartbeat_timeout=timedelta(seconds=step.heartbeat_s or WORKER_LIVENESS_S),
            retry_policy=_retry_policy(step),
        )
        return result

    # ------------------------------------------------------------------ helpers
    def _set_phase(self, phase: str) -> None:
        self._phase = phase
        workflow.upsert_search_attributes([sa.PHASE.value_set(phase)])

    async def _evidence_call(
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
            args=[] if arg is None else [arg],
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
        *,
        outcome: str,
        bundle: EvidenceBundle | None = None,
        diagnosis: Diagnosis | None = None,
        action: RecoveryAction | None = None,
        would_have: list[str] | None = None,
    ) -> RecoveryOutcome:
        self._set_phase("done")
        workflow.upsert_search_attributes([sa.OUTCOME.value_set(outcome)])
        fault = diagnosis.fault_class if diagnosis else (interruption.fault_hint or "unknown")
        state = self._state
        return RecoveryOutcome.model_validate(
            {
                "workflow_id": workflow.info().workflow_id,
                "cluster": interruption.cluster,
                "job_id": interruption.job_id,
                "restart_count": interruption.restart_count,
                "mode": bundle.mode if bundle else "observe",
                "fault_class": fault,
                "action": action or (diagnosis.action if diagnosis else RecoveryAction.NONE),
                "recovered": state.requeued and state.running_again,
                "outcome": outcome,
                "diagnosis": diagnosis,
                "drained_nodes": state.drained_nodes,
                "excluded_nodes": state.excluded_nodes,
                "requeued": state.requeued,
                "job_running_again": state.running_again,
                "checkpoint": state.checkpoint,
                "notes": list(self._notes),
                "would_have": would_have or [],
            }
        )

    def _choose(
        self,
        plans: list[ResolvedPlan],
        diagnosis: Diagnosis,
        bundle: EvidenceBundle,
        charged: int,
    ) -> tuple[RecoveryPlan, ResolvedPlan | None]:
        trust_job_output = not workflow.patched(SECOND_SOURCE_PATCH)
        draft = plan_recovery(
            diagnosis,
            bundle.job,
            bundle.policy,
            charged_restarts=charged,
            nodes=bundle.nodes,
            trust_job_output=trust_job_output,
        )
        chosen = select_plan(plans, diagnosis, draft.action, bundle.job, bundle.mode)
        if (
            chosen is not None
            and chosen.counts_against_budget is not None
            and chosen.counts_against_budget != draft.counts_against_budget
            and draft.requeue
        ):
            draft = plan_recovery(
                diagnosis,
                bundle.job,
                bundle.policy,
                charged_restarts=charged,
                counts_against_budget=chosen.counts_against_budget,
                nodes=bundle.nodes,
                trust_job_output=trust_job_output,
            )
            chosen = select_plan(plans, diagnosis, draft.action, bundle.job, bundle.mode)
        return draft, chosen

    # ------------------------------------------------------------------ the recovery
    @workflow.run
    async def run(self, interruption: Interruption) -> RecoveryOutcome:
        self._notes.append(f"reported by {interruption.source}: {interruption.reason}")

        # 1. gather evidence
        self._set_phase("gathering_evidence")
        try:
            bundle = await self._evidence_call(
                Activity.GATHER_EVIDENCE, interruption, EvidenceBundle, timeout_s=60
            )
        except ActivityError as err:
            self._notes.append(f"cannot gather evidence: {_cause(err)}")
            return self._outcome(interruption, outcome="job_unknown")
        self._notes.extend(bundle.policy_problems)
        if workflow.patched(OPT_IN_PATCH) and not bundle.opted_in:
            # Whoever can start a workflow must not be able to have any job recovered: the
            # job's own policy (comment, partition, cluster default) decides, read now.
            self._notes.append(
                f"job {interruption.job_id} is not opted in (policy from"
                f" {bundle.policy_source}): recovery refused, nothing was changed"
            )
            return self._outcome(interruption, outcome="refused_not_opted_in", bundle=bundle)
        dry_run = bundle.mode == "observe"

        # 2. attribute: log evidence + scheduler state + what other sensors reported
        self._set_phase("attributing")
        reported: list[Evidence] = []
        for report in [interruption, *self._reported]:
            for item in report.evidence:
                if item not in reported:
                    reported.append(item)
        diagnosis = await self._evidence_call(
            Activity.ATTRIBUTE,
            AttributeRequest(bundle=bundle, reported=reported),
            Diagnosis,
            timeout_s=bundle.activity_timeout_s,
            heartbeat_s=30,
        )
        self._fault_class = diagnosis.fault_class.value
        workflow.upsert_search_attributes([sa.FAULT_CLASS.value_set(diagnosis.fault_class.value)])

        # 3. plan: the budget, then the first recovery plan whose rule matches
        self._set_phase("planning")
        charged = await self._evidence_call(
            Activity.CHARGED_RESTARTS,
            ChargedRestartsRequest(
                cluster=interruption.cluster,
                job_id=interruption.job_id,
                current_workflow_id=workflow.info().workflow_id,
            ),
            int,
            timeout_s=30,
        )
        plans = await self._evidence_call(
            Activity.RECOVERY_PLANS, None, list[ResolvedPlan], timeout_s=30
        )
        draft, chosen = self._choose(plans, diagnosis, bundle, charged)
        self._notes.extend(draft.reasons)
        nodes = sorted(set(interruption.nodes) | set(bundle.job.nodes) | set(draft.drain_nodes))
        workflow.upsert_search_attributes([sa.NODES.value_set(nodes)])
        if chosen is None:
            self._notes.append(f"no recovery plan matches action {draft.action.value}")
            return self._outcome(
                interruption,
                outcome="no_plan",
                bundle=bundle,
                diagnosis=diagnosis,
                action=draft.action,
            )
        self._plan_name = chosen.name
        self._notes.append(f"plan '{chosen.name}' ({chosen.source})")
        self._state = IncidentState(excluded_nodes=list(draft.exclude_nodes))

        # 4. run the plan's steps in order (operator control: approvals gate plan and steps)
        approvals: ApprovalSettings | None = None
        if not dry_run and workflow.patched(OPERATOR_PATCH):
            approvals = await self._evidence_call(
                OperatorActivity.SETTINGS, None, ApprovalSettings, timeout_s=30
            )
            why = plan_approval_needed(chosen)
            if why and not await self._ask(why, chosen, approvals):
                return self._outcome(
                    interruption,
                    outcome="denied",
                    bundle=bundle,
                    diagnosis=diagnosis,
                    action=draft.action,
                )
        would_have: list[str] = []
        outcome: str | None = None
        for step in chosen.steps:
            self._set_phase(_phase_of(step.activity))
            approved_by: str | None = None
            if approvals is not None:
                why = approval_needed(step, draft, bundle.job, approvals)
                if why:
                    if not await self._ask(why, chosen, approvals):
                        self._notes.append(f"{step.activity} skipped: not approved")
                        continue
                    approved_by = self._gate.decisions[-1].by
            step_input = StepInput(
                workflow_id=workflow.info().workflow_id,
                activity=step.activity,
                params=step.params,
                dry_run=dry_run,
                bundle=bundle,
                diagnosis=diagnosis,
                plan=draft,
                state=self._state,
                liveness_s=None if step.heartbeat_s else WORKER_LIVENESS_S,
                approved_by=approved_by,
            )
            try:
                result = await self._execute_step(step, step_input)
                asked = result.data.get(APPROVAL_NEEDED_KEY) if approvals is not None else None
                if isinstance(asked, str) and approvals is not None:
                    # the step needs a person to go further (a drain over the drain budget)
                    self._notes.extend(result.notes)
                    result = result.model_copy(update={"notes": []})
                    if await self._ask(asked, chosen, approvals):
                        by = self._gate.decisions[-1].by
                        step_input = step_input.model_copy(update={"approved_by": by})
                        result = await self._execute_step(step, step_input)
            except ActivityError as err:
                self._notes.append(f"{step.activity} failed: {_cause(err)}")
                if step.on_failure == "stop":
                    outcome = "failed"
                    break
                continue
            self._state = _fold(self._state, result)
            would_have.extend(result.would_have)
            self._notes.extend(result.notes)
            if result.detail:
                self._notes.append(f"{step.activity}: {result.detail}")
            if result.requeued and draft.counts_against_budget and not dry_run:
                workflow.upsert_search_attributes([sa.BUDGET_CHARGED.value_set(True)])
            if result.stop_recovery:
                outcome = result.outcome or "stopped"
                break
            if not result.ok and step.on_failure == "stop":
                outcome = "failed"
                break

        if outcome is None:
            if dry_run:
                outcome = "observed"
            elif draft.action is RecoveryAction.STOP:
                outcome = "stopped"
            elif draft.action is RecoveryAction.NONE:
                outcome = "nothing_to_do"
            elif self._state.requeued and self._state.running_again:
                outcome = "recovered"
            elif self._state.requeued:
                outcome = "requeued_not_running"
            else:
                outcome = "not_requeued"
        return self._outcome(
            interruption,
            outcome=outcome,
            bundle=bundle,
            diagnosis=diagnosis,
            action=draft.action,
            would_have=would_have,
        )
