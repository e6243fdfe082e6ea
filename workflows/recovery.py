"""RecoveryWorkflow: one per interrupted job attempt.

Five phases, one method each, in the order ``run`` calls them: 1. gather evidence
(``_gather_evidence``, then ``_refuse`` a job that is not opted in, then the waits of
``workflows/second_source.py``: for a second source while a node agent's silence alone
reports a job Slurm still runs, and for a not-responding node to be read twice)
-> 2. assess
(``_assess``: the diagnosis and every other input of the decision) -> 3. decide
(``_decide``: one call of ``resurrect/plans/decide.py``) -> 4. run the chosen recovery
plan's steps (``_run_plan_steps``; by default: drain implicated nodes -> verify checkpoint
-> requeue excluding them -> wait until the job runs again) -> 5. outcome
(``_final_outcome``, ``_outcome``: a :class:`RecoveryOutcomeKind`).

The workflow decides and orders; every side effect is an activity called by name. Which
steps run is data: the first recovery plan (``resurrect/plans``) whose rule matches the
diagnosis. Each step gets a :class:`StepInput` and returns a :class:`StepResult` that is
folded into the recovery's state. In ``observe`` mode the steps get ``observe`` set and
report what they would have done. The phase (the step running) is a query (``phase``) and
a search attribute (``ResurrectPhase``), so people can follow and filter recoveries in
the Temporal UI.

Few events per recovery: evidence is gathered by a local activity (a few scheduler reads);
``recovery.assess`` and the steps the worker names in ``Assessment.quick_steps`` run first
as a local activity of ``QUICK_S`` seconds, without retries; one that needs longer (it
raises ``NeedsMoreTime``: the job is not running yet, a checkpoint takes time to read, a
node agent must confirm) or fails in a way that may pass runs again as an activity task
with its whole timeouts and retry policy. The search attributes are upserted once per
workflow task, only those that changed. A node loss is one workflow task (14 history
events, two of them the patch's marker and the SDK's upsert of ``TemporalChangeVersion``
that names it). What happened stays readable: the ``status`` query, the result's notes and
the markers show every step. docs/versioning.md says how a change to these commands lands.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from resurrect.config import ApprovalSettings
    from resurrect.contracts import (
        Diagnosis,
        Evidence,
        Interruption,
        RecoveryAction,
        RecoveryContext,
        RecoveryDecision,
        RecoveryOutcome,
        RecoveryPhase,
        RecoveryState,
        StepInput,
        StepResult,
        restart_charged,
        step_phase,
    )
    from resurrect.contracts import (
        RecoveryOutcomeKind as Kind,
    )
    from resurrect.contracts.assessment import Assessment, AssessRequest
    from resurrect.contracts.recovery_status import RecoveryWorkflowStatus
    from resurrect.contracts.workflow_names import (
        APPROVE_UPDATE,
        DENY_UPDATE,
        PHASE_QUERY,
        RECOVERY_WORKFLOW,
        REPORT_SIGNAL,
        STATUS_QUERY,
        Activity,
    )
    from resurrect.errors import non_retryable_error_types
    from resurrect.operator.approvals import (
        approval_needed,
        plan_approval_needed,
        timeout_default,
    )
    from resurrect.operator.models import ApprovalInput
    from resurrect.plans.decide import decide_assessed
    from resurrect.plans.models import ResolvedPlan, ResolvedStep
    from resurrect.temporal import search_attributes as sa
    from resurrect.workflows.activity_calls import (
        ACTIVITY_FAILURES,
        QUICK_S,
        ActivityCalls,
        describe_failure,
    )
    from resurrect.workflows.approval_gate import ApprovalGate, describe
    from resurrect.workflows.second_source import (
        NOT_RESPONDING_READ_TWICE,
        EvidenceReads,
        evidence_of_reports,
    )

# Retries of the evidence activities, which talk to the scheduler: a controller that is down
# for minutes must not fail the recovery; errors that cannot get better do not retry.
SCHEDULER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=15),
    maximum_attempts=0,
    non_retryable_error_types=non_retryable_error_types(),
)
SCHEDULE_TO_CLOSE = timedelta(minutes=30)
# A step whose plan sets no heartbeat timeout is retried on another worker this soon after
# its worker died (the step wrapper heartbeats for it).
WORKER_LIVENESS_S = 10.0


@dataclass(frozen=True)
class DecidedRecovery:
    """What the plan's steps work on: the report, the evidence, the diagnosis, the decision."""

    interruption: Interruption
    bundle: RecoveryContext
    diagnosis: Diagnosis
    decision: RecoveryDecision
    approvals: ApprovalSettings
    quick_steps: frozenset[str]  # steps tried first as local activities

    @property
    def observe(self) -> bool:
        """Observe mode: the steps change nothing and say what they would have done."""
        return self.bundle.mode == "observe"


def _retry_policy(step: ResolvedStep) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=step.retry.initial_interval_s),
        backoff_coefficient=step.retry.backoff,
        maximum_interval=timedelta(seconds=step.retry.max_interval_s),
        maximum_attempts=step.retry.max_attempts,
        non_retryable_error_types=non_retryable_error_types(),
    )


def _fold(state: RecoveryState, result: StepResult) -> RecoveryState:
    update: dict[str, object] = {}
    if result.drained_nodes:
        update["drained_nodes"] = list(dict.fromkeys([*state.drained_nodes, *result.drained_nodes]))
    if result.excluded_nodes:
        # exclusions resurrect gave back (resurrect/operator/exclusions.py) leave the list
        given_back = set(result.dropped_exclusions)
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
    if result.next_attempt_output:
        update["next_attempt_output"] = result.next_attempt_output
    return state.model_copy(update=update)


@workflow.defn(name=RECOVERY_WORKFLOW)
class RecoveryWorkflow:
    def __init__(self) -> None:
        self._phase: RecoveryPhase | str = RecoveryPhase.REPORTED
        self._reported: list[Interruption] = []
        # the evidence of every report, as the assessment read it; the decision reads the same
        self._reported_evidence: list[Evidence] = []
        self._notes: list[str] = []
        self._fault_class: str | None = None
        self._plan_name: str | None = None
        self._state = RecoveryState()
        self._would_have: list[str] = []  # observe mode: what the steps would have done
        self._gate = ApprovalGate()
        self._search = sa.SearchAttributeBatch()
        self._calls = ActivityCalls(self._notes, self._search.publish)
        self._reads = EvidenceReads(self._read_once, self._reported, self._notes, self._set_phase)

    # ------------------------------------------------------------------ signals/queries
    @workflow.signal(name=REPORT_SIGNAL)
    def report(self, interruption: Interruption) -> None:
        """Another sensor saw the same failure: keep its evidence (de-duplicated)."""
        if interruption not in self._reported:
            self._reported.append(interruption)

    @workflow.query(name=PHASE_QUERY)
    def phase(self) -> str:
        return str(self._phase)

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
        self._set_phase(RecoveryPhase.AWAITING_APPROVAL)
        self._search.publish()
        self._notes.append(f"awaiting approval: {what} (default after {timeout_s:g} s: {default})")
        decision = await self._gate.wait(what, timeout_s, default)
        self._notes.append(describe(decision))
        self._set_phase(previous)
        return decision.approved

    # ------------------------------------------------------------------ helpers
    def _set_phase(self, phase: RecoveryPhase | str) -> None:
        self._phase = phase
        self._search.set(sa.PHASE, str(phase))  # visibility stores the value

    # ------------------------------------------------------------------ the recovery
    @workflow.run
    async def run(self, interruption: Interruption) -> RecoveryOutcome:
        self._search.begin()
        if workflow.patched(NOT_RESPONDING_READ_TWICE):
            self._reads.read_twice()
        self._notes.append(f"reported by {interruption.source}: {interruption.reason}")
        bundle = await self._gather_evidence(interruption)
        if bundle is None:
            return self._outcome(Kind.JOB_UNKNOWN, interruption)
        if self._refuse(interruption, bundle):
            return self._outcome(Kind.REFUSED_NOT_OPTED_IN, interruption, bundle)
        confirmed = await self._reads.await_second_source(interruption, bundle)
        if not isinstance(confirmed, Kind):
            confirmed = await self._reads.read_not_responding_again(interruption, confirmed)
        if isinstance(confirmed, Kind):  # the attempt ended with nothing confirmed
            return self._outcome(confirmed, interruption, bundle)
        assessment = await self._assess(interruption, confirmed)
        recovery, plan = self._decide(interruption, confirmed, assessment)
        if plan is None:
            return self._outcome(Kind.NO_PLAN, interruption, confirmed, recovery)
        ended = await self._run_plan_steps(recovery, plan)
        final = ended or self._final_outcome(recovery)
        return self._outcome(final, interruption, confirmed, recovery)

    # 1. gather evidence -------------------------------------------------------------------
    async def _gather_evidence(self, interruption: Interruption) -> RecoveryContext | None:
        """The job, its nodes and policy as the scheduler shows them; None when unknown."""
        self._set_phase(RecoveryPhase.GATHERING_EVIDENCE)
        bundle = await self._reads.read(interruption)
        if bundle is not None:
            self._notes.extend(bundle.policy_problems)
        return bundle

    async def _read_once(self, interruption: Interruption) -> RecoveryContext | None:
        try:
            return await self._calls.run(
                Activity.GATHER_EVIDENCE,
                [interruption],
                RecoveryContext,
                local=True,  # a few scheduler reads
                timeout=timedelta(seconds=60),
                deadline=SCHEDULE_TO_CLOSE,
                heartbeat=None,
                retry=SCHEDULER_RETRY,
            )
        except ACTIVITY_FAILURES as err:
            self._notes.append(f"cannot gather evidence: {describe_failure(err)}")
            return None

    def _refuse(self, interruption: Interruption, bundle: RecoveryContext) -> bool:
        """Whoever can start a workflow must not be able to have any job recovered: the
        job's own policy (comment, partition, cluster default) decides, read now."""
        if bundle.opted_in:
            return False
        self._notes.append(
            f"job {interruption.job_id} is not opted in (policy from"
            f" {bundle.policy_source}): recovery refused, nothing was changed"
        )
        return True

    # 2. assess ---------------------------------------------------------------------------
    async def _assess(self, interruption: Interruption, bundle: RecoveryContext) -> Assessment:
        """Log evidence + scheduler state + what other sensors reported -> one diagnosis,
        with the decision's other inputs (one activity, ``recovery.assess``)."""
        self._set_phase(RecoveryPhase.ASSESSING)
        reported = self._reported_evidence = evidence_of_reports(interruption, self._reported)
        request = AssessRequest(
            bundle=bundle, reported=reported, workflow_id=workflow.info().workflow_id
        )
        assessment = await self._calls.quick_first(
            Activity.ASSESS,
            request.model_copy(update={"quick_s": QUICK_S}),
            request,
            Assessment,
            timeout=timedelta(seconds=bundle.activity_timeout_s + 30),  # + the budget count
            deadline=SCHEDULE_TO_CLOSE,
            heartbeat=timedelta(seconds=30),
            retry=SCHEDULER_RETRY,
        )
        self._fault_class = assessment.diagnosis.fault_class.value
        self._search.set(sa.FAULT_CLASS, self._fault_class)
        if assessment.incarnation is not None:  # in the same upsert (None in older histories)
            self._search.set(sa.INCARNATION, assessment.incarnation)
        if assessment.history.last_step is not None:
            self._search.set(sa.LAST_STEP, assessment.history.last_step)
        return assessment

    # 3. decide ----------------------------------------------------------------------------
    def _decide(
        self, interruption: Interruption, bundle: RecoveryContext, assessment: Assessment
    ) -> tuple[DecidedRecovery, ResolvedPlan | None]:
        """One decision (plans/decide.py) from the diagnosis, the restart budget used so far
        and the plans: what the plan's steps work on, and that plan (None: no plan matches)."""
        choice = decide_assessed(bundle, assessment, self._reported_evidence)
        self._notes.extend(choice.notes)
        drain = choice.decision.drain_nodes
        nodes = sorted(set(interruption.nodes) | set(bundle.job.nodes) | set(drain))
        self._search.set(sa.NODES, nodes)
        if choice.plan is not None:
            self._plan_name = choice.plan.name
            self._state = RecoveryState(excluded_nodes=list(choice.decision.exclude_nodes))
        recovery = DecidedRecovery(
            interruption,
            bundle,
            assessment.diagnosis,
            choice.decision,
            approvals=assessment.approvals,
            quick_steps=frozenset(assessment.quick_steps),
        )
        return recovery, choice.plan

    # 4. run the plan's steps --------------------------------------------------------------
    async def _run_plan_steps(self, recovery: DecidedRecovery, plan: ResolvedPlan) -> Kind | None:
        """Run the plan's steps in order; the outcome when one ends the recovery early.

        Operator control: a plan that needs approval waits for it before its first step, a
        step that needs it waits before it runs (denied: skipped), and a step that asks for a
        person to go further (a drain over the drain budget) is run again once approved.
        """
        approvals = None if recovery.observe else recovery.approvals
        if approvals is not None:
            why = plan_approval_needed(plan)
            if why and not await self._ask(why, plan, approvals):
                return Kind.DENIED
        for step in plan.steps:
            self._set_phase(step_phase(step.activity))
            approved_by: str | None = None
            if approvals is not None:
                why = approval_needed(step, recovery.decision, recovery.bundle.job, approvals)
                if why:
                    if not await self._ask(why, plan, approvals):
                        self._notes.append(f"{step.activity} skipped: not approved")
                        continue
                    approved_by = self._gate.decisions[-1].by
            ended = await self._run_step(recovery, step, plan, approvals, approved_by)
            if ended is not None:
                return ended
        return None

    async def _run_step(
        self,
        recovery: DecidedRecovery,
        step: ResolvedStep,
        plan: ResolvedPlan,
        approvals: ApprovalSettings | None,
        approved_by: str | None,
    ) -> Kind | None:
        """One step: run it, fold its result into the state; the outcome if it ends it."""
        step_input = self._step_input(recovery, step, approved_by)
        quick = step.activity in recovery.quick_steps
        try:
            result = await self._execute_step(step, step_input, quick=quick)
            asked = result.approval_needed
            if asked is not None and approvals is not None:
                # the step needs a person to go further (a drain over the drain budget)
                self._notes.extend(result.notes)
                result = result.model_copy(update={"notes": []})
                if await self._ask(asked, plan, approvals):
                    by = self._gate.decisions[-1].by
                    step_input = step_input.model_copy(update={"approved_by": by})
                    result = await self._execute_step(step, step_input, quick=quick)
        except ACTIVITY_FAILURES as err:
            self._notes.append(f"{step.activity} failed: {describe_failure(err)}")
            return Kind.FAILED if step.on_failure == "stop" else None
        self._state = _fold(self._state, result)
        if result.checkpoint is not None and result.checkpoint.resume_step is not None:
            self._search.set(sa.RESUME_STEP, result.checkpoint.resume_step)
        self._would_have.extend(result.would_have)
        self._notes.extend(result.notes)
        if result.detail:
            self._notes.append(f"{step.activity}: {result.detail}")
        if restart_charged(result.requeued, recovery.decision, recovery.observe):
            self._search.set(sa.BUDGET_CHARGED, True)
        if result.stop_recovery:
            return result.outcome or Kind.STOPPED
        if not result.ok and step.on_failure == "stop":
            return Kind.FAILED
        return None

    def _step_input(
        self, recovery: DecidedRecovery, step: ResolvedStep, approved_by: str | None = None
    ) -> StepInput:
        """The step's input for an activity task (``_execute_step`` adapts it to a local
        activity)."""
        return StepInput(
            workflow_id=workflow.info().workflow_id,
            activity=step.activity,
            params=step.params,
            observe=recovery.observe,
            bundle=recovery.bundle,
            diagnosis=recovery.diagnosis,
            decision=recovery.decision,
            state=self._state,
            liveness_s=None if step.heartbeat_s else WORKER_LIVENESS_S,
            approved_by=approved_by,
        )

    async def _execute_step(
        self, step: ResolvedStep, step_input: StepInput, *, quick: bool
    ) -> StepResult:
        """Run the step as an activity task, or (``quick``) as a local activity first
        (given ``QUICK_S``), then as an activity task if it needs more."""
        options: dict[str, Any] = {
            "timeout": timedelta(seconds=step.timeout_s),
            "deadline": timedelta(seconds=step.deadline_s),
            "heartbeat": timedelta(seconds=step.heartbeat_s or WORKER_LIVENESS_S),
            "retry": _retry_policy(step),
        }
        if quick:
            # a local activity cannot heartbeat: the worker running it is the one running this
            quick_input = step_input.model_copy(update={"liveness_s": None, "quick_s": QUICK_S})
            return await self._calls.quick_first(
                step.activity, quick_input, step_input, StepResult, **options
            )
        return await self._calls.run(
            step.activity, [step_input], StepResult, local=False, **options
        )

    # 5. outcome ---------------------------------------------------------------------------
    def _final_outcome(self, recovery: DecidedRecovery) -> Kind:
        """How a recovery whose steps all ran ended."""
        if recovery.observe:
            return Kind.OBSERVED
        if recovery.decision.action is RecoveryAction.STOP:
            return Kind.STOPPED
        if recovery.decision.action is RecoveryAction.NONE:
            return Kind.NOTHING_TO_DO
        if self._state.requeued and self._state.running_again:
            return Kind.RECOVERED
        if self._state.requeued:
            return Kind.REQUEUED_NOT_RUNNING
        return Kind.NOT_REQUEUED

    def _outcome(
        self,
        outcome: Kind,
        interruption: Interruption,
        bundle: RecoveryContext | None = None,
        recovery: DecidedRecovery | None = None,
    ) -> RecoveryOutcome:
        self._set_phase(RecoveryPhase.DONE)
        diagnosis = recovery.diagnosis if recovery else None
        decision = recovery.decision if recovery else None
        self._search.set(sa.OUTCOME, outcome.value)
        self._search.publish()
        fault = diagnosis.fault_class if diagnosis else (interruption.fault_hint or "unknown")
        action = decision.action if decision else None
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
                "would_have": list(self._would_have),
                "next_attempt_output": state.next_attempt_output,
            }
        )
