"""RecoveryWorkflow: one per interrupted job attempt.

Five phases, one method each, in the order ``run`` calls them: 1. gather evidence
(``_gather_evidence``, then ``_refuse`` a job that is not opted in, then
``_await_second_source`` while a node agent's silence alone reports a job Slurm still runs)
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
from functools import partial
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from resurrect.config import ApprovalSettings
    from resurrect.contracts import (
        Diagnosis,
        Evidence,
        EvidenceBundle,
        Interruption,
        JobState,
        RecoveryAction,
        RecoveryDecision,
        RecoveryOutcome,
        RecoveryPhase,
        RecoveryState,
        StepInput,
        StepResult,
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
    from resurrect.evidence_trust import (
        UnavailabilityReads,
        silence_awaiting_a_second_source,
        silence_only,
        slurm_marked,
    )
    from resurrect.operator.approvals import (
        approval_needed,
        plan_approval_needed,
        timeout_default,
    )
    from resurrect.operator.models import ApprovalInput
    from resurrect.plans.decide import decide
    from resurrect.plans.models import ResolvedPlan, ResolvedStep
    from resurrect.temporal import search_attributes as sa
    from resurrect.workflows.activity_calls import (
        ACTIVITY_FAILURES,
        QUICK_S,
        ActivityCalls,
        describe_failure,
    )
    from resurrect.workflows.approval_gate import ApprovalGate, describe
    from resurrect.workflows.search_batch import SearchAttributeBatch

# A node agent's silence alone changes nothing while the job runs on nodes Slurm sees: the
# recovery waits for a second source (``_await_second_source``). Its re-reads of the job: a
# report with evidence of its own (the follower's, the agent's) wakes the wait at once, but
# the Slurm watcher's reports carry none (the job's state is read here), so the re-reads are
# how the wait sees the attempt end or Slurm mark a node. The first after this pause, then a
# quarter of the time waited so far, at most the maximum: one scheduler read per waiting job
# per pause (after heartbeats lost for a whole fleet, every running job waits: 10,000 jobs
# cost 1,000 reads a second for the first half minute, then fewer as the pauses grow).
SECOND_SOURCE_FIRST_PAUSE_S = 10.0
SECOND_SOURCE_MAX_PAUSE_S = 600.0
# History stays bounded: after this many re-reads the wait continues as new.
SECOND_SOURCE_CHECKS_PER_RUN = 500
# Patch of 0.2.1 (docs/versioning.md): a node unavailable without being DOWN (NOT_RESPONDING,
# as every node is for a moment after slurmctld restarts) is Slurm's word only when reads at
# least the grace apart all show it; the recovery reads again after the grace to know. Asked
# once, before the first activity. Without it (recoveries 0.2.0 started) one read was enough.
NOT_RESPONDING_READ_TWICE = "not-responding-read-twice"
# At most this many reads after the grace before the assessment: a node still not lasting
# after them (a new one each time) is not Slurm's word.
NOT_RESPONDING_REREADS = 3
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
    bundle: EvidenceBundle
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
        self._search = SearchAttributeBatch()
        self._calls = ActivityCalls(self._notes, self._search.publish)
        # reads of the job's nodes (the NOT_RESPONDING_READ_TWICE patch; None without it),
        # timed by the seconds of the pauses that ran out between them: a pause is a timer
        # started after the read before it returned, so reads that far apart are at least
        # that far apart on any clock
        self._unavailability: UnavailabilityReads | None = None
        self._paused_s = 0.0
        self._noted_not_responding: set[str] = set()

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
            self._unavailability = UnavailabilityReads()
        self._notes.append(f"reported by {interruption.source}: {interruption.reason}")
        bundle = await self._gather_evidence(interruption)
        if bundle is None:
            return self._outcome(Kind.JOB_UNKNOWN, interruption)
        if self._refuse(interruption, bundle):
            return self._outcome(Kind.REFUSED_NOT_OPTED_IN, interruption, bundle)
        confirmed = await self._await_second_source(interruption, bundle)
        if not isinstance(confirmed, Kind):
            confirmed = await self._read_not_responding_again(interruption, confirmed)
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
    async def _gather_evidence(self, interruption: Interruption) -> EvidenceBundle | None:
        """The job, its nodes and policy as the scheduler shows them; None when unknown."""
        self._set_phase(RecoveryPhase.GATHERING_EVIDENCE)
        bundle = await self._read_evidence(interruption)
        if bundle is not None:
            self._notes.extend(bundle.policy_problems)
        return bundle

    async def _read_evidence(self, interruption: Interruption) -> EvidenceBundle | None:
        """One reading of the job and its nodes (a local activity); None when it fails. With
        the NOT_RESPONDING_READ_TWICE patch, the nodes' states are taken into
        ``_unavailability``."""
        bundle = await self._read_once(interruption)
        if bundle is not None and self._unavailability is not None:
            self._unavailability.observe(
                bundle.nodes, self._paused_s, bundle.not_responding_grace_s
            )
        return bundle

    async def _read_once(self, interruption: Interruption) -> EvidenceBundle | None:
        try:
            return await self._calls.run(
                Activity.GATHER_EVIDENCE,
                [interruption],
                EvidenceBundle,
                local=True,  # a few scheduler reads
                timeout=timedelta(seconds=60),
                deadline=SCHEDULE_TO_CLOSE,
                heartbeat=None,
                retry=SCHEDULER_RETRY,
            )
        except ACTIVITY_FAILURES as err:
            self._notes.append(f"cannot gather evidence: {describe_failure(err)}")
            return None

    def _refuse(self, interruption: Interruption, bundle: EvidenceBundle) -> bool:
        """Whoever can start a workflow must not be able to have any job recovered: the
        job's own policy (comment, partition, cluster default) decides, read now."""
        if bundle.opted_in:
            return False
        self._notes.append(
            f"job {interruption.job_id} is not opted in (policy from"
            f" {bundle.policy_source}): recovery refused, nothing was changed"
        )
        return True

    # 1b. a node agent's silence alone -----------------------------------------------------
    async def _await_second_source(
        self, interruption: Interruption, bundle: EvidenceBundle
    ) -> EvidenceBundle | Kind:
        """Change nothing while node agents' silence alone reports a job that Slurm still
        runs on nodes it sees (:func:`silence_awaiting_a_second_source`): wait for another
        report, re-reading the job after pauses that grow with the wait, until the attempt
        ends or Slurm marks a silent node. The evidence to recover with, or the outcome when
        the attempt completed (or could no longer be read) with nothing confirmed."""
        reported = self._evidence_of_reports(interruption)
        silent = silence_awaiting_a_second_source(
            reported, bundle.job, self._slurm_marked(bundle), interruption.restart_count
        )
        if not silent:
            return bundle
        self._set_phase(RecoveryPhase.AWAITING_SECOND_SOURCE)
        job_id = interruption.job_id
        self._notes.append(
            f"only the silence of the node agent on {', '.join(silent)} reports job {job_id},"
            " which Slurm still runs there: nothing is changed until a second source agrees"
            " (the attempt ending, Slurm marking the node, another report)"
        )
        began = workflow.now()
        checks = 0
        while silent:
            waited_s = (workflow.now() - began).total_seconds()
            pause_s = min(SECOND_SOURCE_MAX_PAUSE_S, max(SECOND_SOURCE_FIRST_PAUSE_S, waited_s / 4))
            try:
                await workflow.wait_condition(
                    partial(self._reported_more_than, len(self._reported)),
                    timeout=timedelta(seconds=pause_s),
                )
            except TimeoutError:
                self._paused_s += pause_s
            read = await self._read_evidence(interruption)
            if read is None:
                return Kind.JOB_UNKNOWN
            bundle = read
            reported = self._evidence_of_reports(interruption)
            silent = silence_awaiting_a_second_source(
                reported, bundle.job, self._slurm_marked(bundle), interruption.restart_count
            )
            checks += 1
            self._note_not_responding_once(bundle)
            if silent and checks >= SECOND_SOURCE_CHECKS_PER_RUN:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(interruption.model_copy(update={"evidence": reported}))
        waited = f"after {(workflow.now() - began).total_seconds():.0f} s"
        job = bundle.job
        if (
            job.state is JobState.COMPLETED
            and job.restart_count == interruption.restart_count
            and all(silence_only(e) for e in reported)
        ):
            self._notes.append(
                f"job {job_id} completed {waited} while only its node agent's silence reported"
                " it: nothing was changed"
            )
            return Kind.JOB_COMPLETED
        self._notes.append(
            f"a second source {waited}: job {job.state.value}, {len(reported)} evidence"
        )
        return bundle

    def _reported_more_than(self, count: int) -> bool:
        return len(self._reported) > count

    def _slurm_marked(self, bundle: EvidenceBundle) -> set[str]:
        """The nodes of ``bundle`` that Slurm marks lost (:func:`slurm_marked`): with the
        NOT_RESPONDING_READ_TWICE patch, not responding counts only once it lasted."""
        reads = self._unavailability
        return slurm_marked(bundle.nodes, None if reads is None else reads.lasting)

    def _note_not_responding_once(self, bundle: EvidenceBundle) -> None:
        """Say once per node that a read showed it unavailable without being DOWN, and that
        this is not Slurm's word yet (the NOT_RESPONDING_READ_TWICE patch)."""
        reads = self._unavailability
        if reads is None:
            return
        pending = reads.pending(self._paused_s, bundle.not_responding_grace_s)
        fresh = [n for n in pending if n not in self._noted_not_responding]
        if not fresh:
            return
        self._noted_not_responding.update(fresh)
        self._notes.append(
            f"{', '.join(fresh)} unavailable but not DOWN in one read: Slurm's word only if"
            f" a read {bundle.not_responding_grace_s:g} s later still shows it (a controller"
            " that has just restarted shows every node not responding until it registers)"
        )

    async def _read_not_responding_again(
        self, interruption: Interruption, bundle: EvidenceBundle
    ) -> EvidenceBundle | Kind:
        """With the NOT_RESPONDING_READ_TWICE patch: while the last read shows nodes
        unavailable without being DOWN that have not lasted the grace, wait out the grace
        and read again (at most NOT_RESPONDING_REREADS times). The bundle to assess: the
        job as ``bundle`` has it (a job being torn down may list fewer nodes a moment later),
        the nodes as the last read shows them, and those that lasted
        (``lasting_unavailable``); JOB_UNKNOWN when a read fails."""
        reads = self._unavailability
        if reads is None:
            return bundle
        for _ in range(NOT_RESPONDING_REREADS):
            pending = reads.pending(self._paused_s, bundle.not_responding_grace_s)
            if not pending:
                break
            pause_s = max(pending.values())
            self._note_not_responding_once(bundle)
            await workflow.sleep(timedelta(seconds=pause_s))
            self._paused_s += pause_s
            read = await self._read_evidence(interruption)
            if read is None:
                return Kind.JOB_UNKNOWN
            bundle = bundle.model_copy(update={"nodes": read.nodes})
        return bundle.model_copy(update={"lasting_unavailable": sorted(reads.lasting)})

    # 2. assess ---------------------------------------------------------------------------
    async def _assess(self, interruption: Interruption, bundle: EvidenceBundle) -> Assessment:
        """Log evidence + scheduler state + what other sensors reported -> one diagnosis,
        with the decision's other inputs (one activity, ``recovery.assess``)."""
        self._set_phase(RecoveryPhase.ATTRIBUTING)
        reported = self._reported_evidence = self._evidence_of_reports(interruption)
        request = AssessRequest(
            bundle=bundle, reported=reported, workflow_id=workflow.info().workflow_id
        )
        assessment = await self._calls.local_first(
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
        if assessment.history.last_step is not None:
            self._search.set(sa.LAST_STEP, assessment.history.last_step)
        return assessment

    def _evidence_of_reports(self, interruption: Interruption) -> list[Evidence]:
        """The evidence of the first report and of every later one, each item once."""
        reported: list[Evidence] = []
        for report in [interruption, *self._reported]:
            for item in report.evidence:
                if item not in reported:
                    reported.append(item)
        return reported

    # 3. decide ----------------------------------------------------------------------------
    def _decide(
        self, interruption: Interruption, bundle: EvidenceBundle, assessment: Assessment
    ) -> tuple[DecidedRecovery, ResolvedPlan | None]:
        """One decision (plans/decide.py) from the diagnosis, the restart budget used so far
        and the plans: what the plan's steps work on, and that plan (None: no plan matches)."""
        choice = decide(
            bundle,
            assessment.diagnosis,
            assessment.plans,
            assessment.charged_restarts,
            reported=self._reported_evidence,
            history=assessment.history,
            lemons=assessment.lemons,
        )
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
        local_first = step.activity in recovery.quick_steps
        try:
            result = await self._execute_step(step, step_input, local_first=local_first)
            asked = result.approval_needed
            if asked is not None and approvals is not None:
                # the step needs a person to go further (a drain over the drain budget)
                self._notes.extend(result.notes)
                result = result.model_copy(update={"notes": []})
                if await self._ask(asked, plan, approvals):
                    by = self._gate.decisions[-1].by
                    step_input = step_input.model_copy(update={"approved_by": by})
                    result = await self._execute_step(step, step_input, local_first=local_first)
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
        if result.requeued and recovery.decision.counts_against_budget and not recovery.observe:
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
        self, step: ResolvedStep, step_input: StepInput, *, local_first: bool
    ) -> StepResult:
        """Run the step as an activity task, or (``local_first``) as a local activity first
        (given ``QUICK_S``), then as an activity task if it needs more."""
        options: dict[str, Any] = {
            "timeout": timedelta(seconds=step.timeout_s),
            "deadline": timedelta(seconds=step.deadline_s),
            "heartbeat": timedelta(seconds=step.heartbeat_s or WORKER_LIVENESS_S),
            "retry": _retry_policy(step),
        }
        if local_first:
            # a local activity cannot heartbeat: the worker running it is the one running this
            quick_input = step_input.model_copy(update={"liveness_s": None, "quick_s": QUICK_S})
            return await self._calls.local_first(
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
        bundle: EvidenceBundle | None = None,
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
