"""A recovery's contracts: the report, the decision, the checkpoint verdict, the restart
history, the outcome, and what each activity and plan step takes and returns."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from resurrect.contracts.base import Contract
from resurrect.contracts.faults import Diagnosis, Evidence, FaultClass, RecoveryAction
from resurrect.contracts.policy import JobPolicy, RecoveryMode
from resurrect.contracts.scheduler import NOT_RESPONDING_GRACE_S, JobInfo, JobState, NodeInfo
from resurrect.contracts.workflow_ids import recovery_workflow_id


class OutputMark(Contract):
    """Where a job attempt's output begins in one of its output files: the file (inode) and
    the byte offset, as resurrect saw them (never as the job says). A requeued job may
    append every attempt to the same file; a recovery reads from here on."""

    path: str
    inode: int = Field(ge=0)
    offset: int = Field(ge=0)


class Interruption(Contract):
    """A sensor's report that an opted-in job was interrupted (or is about to be)."""

    cluster: str
    job_id: str
    restart_count: int = Field(ge=0)
    source: str  # "slurm_watcher", "log_tail", "node_agent", ...
    reason: str
    observed_at: datetime
    job_state: JobState | None = None
    nodes: list[str] = Field(default_factory=list)
    suspect_nodes: list[str] = Field(default_factory=list)
    fault_hint: FaultClass | None = None
    evidence: list[Evidence] = Field(default_factory=list)
    # The log follower's reports: where it began following this attempt in each file.
    output_marks: list[OutputMark] = Field(default_factory=list)

    @property
    def workflow_id(self) -> str:
        return recovery_workflow_id(self.cluster, self.job_id, self.restart_count)


class RecoveryDecision(Contract):
    """What this recovery will do, decided from the diagnosis, the job's policy and budget.

    Per recovery (``resurrect.plans.decide``); not to be confused with the YAML recovery
    plans (``resurrect.plans``), whose steps carry the decision out.
    """

    action: RecoveryAction
    drain_nodes: list[str] = Field(default_factory=list)
    exclude_nodes: list[str] = Field(default_factory=list)
    requeue: bool = False
    counts_against_budget: bool = True
    reasons: list[str] = Field(default_factory=list)
    # Of drain_nodes, those drained for their lemon record (resurrect/lemons/policy.py).
    lemon_nodes: list[str] = Field(default_factory=list)


class CheckpointCandidate(Contract):
    """One checkpoint under the root. ``valid``: may be loaded (nothing found wrong).
    ``judged`` False: resurrect did not understand all of it (e.g. metadata of a PyTorch it
    does not know); the checks that could run passed and the job's own loader is the judge."""

    path: str
    step: int | None
    valid: bool
    reason: str
    judged: bool = True


class CheckpointVerdict(Contract):
    """Which checkpoint the job will resume from, and why."""

    root: str | None
    verified: bool
    latest_valid: str | None = None
    resume_step: int | None = None
    candidates: list[CheckpointCandidate] = Field(default_factory=list)
    quarantined: list[str] = Field(default_factory=list)
    note: str = ""


class AttemptRecord(Contract):
    """What an earlier recovery of the same job recorded about the attempt it ended."""

    restart_count: int  # the attempt (Slurm's restart count)
    outcome: str | None = None  # RecoveryOutcomeKind value; None while it ran
    requeued: bool = False  # it requeued the job (a restart)
    charged: bool = False  # that restart was charged to the job's budget
    last_step: int | None = None  # the last training step the attempt printed
    resume_step: int | None = None  # the checkpoint step the next attempt resumed from
    closed_at: datetime | None = None


class RestartHistory(Contract):
    """The job's earlier attempts as its recoveries recorded them (oldest first), and the last
    step the attempt interrupted now printed: what tells a restart loop."""

    last_step: int | None = None
    earlier: list[AttemptRecord] = Field(default_factory=list)
    read_at: datetime | None = None  # when the records were read (rule 10's window ends)
    # Rule 9 counts progress only from checkpoints that verified: each earlier attempt's
    # ``resume_step`` (the checkpoint helper's verdict) and, for the attempt interrupted
    # now, ``verified_step`` (its newest intact checkpoint, looked up only when a loop is in
    # question; None: none newer verified). False (histories recorded before): the printed
    # steps count too.
    progress_from_checkpoints: bool = False
    verified_step: int | None = None
    # The job's free restarts over its whole life (None: not counted; no lifetime cap).
    free_restarts: int | None = None


class RecoveryPhase(StrEnum):
    """Where a recovery is: the ``phase`` query, ``RecoveryWorkflowStatus.phase`` and the
    ``ResurrectPhase`` search attribute (the values are what visibility stores). While a plan
    step runs, the phase is the step: a built-in step (``recovery.<name>``) as its member
    here, a plugin's step as its activity name (``<namespace>.<step>``, a plain string)."""

    REPORTED = "reported"  # the workflow started; nothing read yet
    GATHERING_EVIDENCE = "gathering_evidence"  # reading the job, its nodes and policy
    AWAITING_SECOND_SOURCE = "awaiting_second_source"  # only a node agent's silence reports
    # The assessment (``recovery.assess``): the diagnosis and the decision's other inputs.
    # The value keeps 0.2.0's word: visibility stores it and released clients filter on it.
    ASSESSING = "attributing"
    AWAITING_APPROVAL = "awaiting_approval"  # waiting for a person (``resurrect approve``)
    DRAIN_NODES = "drain_nodes"  # the built-in steps, one each
    VERIFY_CHECKPOINT = "verify_checkpoint"
    REQUEUE_JOB = "requeue_job"
    WAIT_RUNNING = "wait_running"
    NOTIFY = "notify"
    RUN_PROGRAM = "run_program"
    DONE = "done"  # the recovery ended (its outcome is set)


def step_phase(activity: str) -> RecoveryPhase | str:
    """The phase while the plan step ``activity`` runs (see :class:`RecoveryPhase`)."""
    namespace, _, name = activity.partition(".")
    if namespace != "recovery":
        return activity
    try:
        return RecoveryPhase(name)
    except ValueError:
        return name


class RecoveryOutcomeKind(StrEnum):
    """How a recovery ended: ``RecoveryOutcome.outcome`` and the ``ResurrectOutcome`` search
    attribute. Every value is documented in docs/architecture.md ("Outcomes")."""

    RECOVERED = "recovered"  # requeued, and the job runs again
    REQUEUED_NOT_RUNNING = "requeued_not_running"  # requeued; not running within the wait
    NOT_REQUEUED = "not_requeued"  # the plan ran but nothing requeued the job
    OBSERVED = "observed"  # observe mode: nothing changed; ``would_have`` says what act would
    STOPPED = "stopped"  # decided to stop (application fault, budget spent) or a step stopped
    NOTHING_TO_DO = "nothing_to_do"  # a person cancelled the job
    NO_PLAN = "no_plan"  # no recovery plan matches the decided action
    FAILED = "failed"  # a step with ``on_failure: stop`` failed
    JOB_UNKNOWN = "job_unknown"  # the evidence could not be gathered (no such job, ...)
    REFUSED_NOT_OPTED_IN = "refused_not_opted_in"  # the job's policy does not opt it in
    STOPPED_NO_CHECKPOINT = "stopped_no_checkpoint"  # no checkpoint verified (the policy asks)
    JOB_COMPLETED = "job_completed"  # finished by the requeue, or while silence alone reported it
    CANCELLED_DURING_RECOVERY = "cancelled_during_recovery"  # cancelled while recovering
    DENIED = "denied"  # a person (or the approval timeout's default) denied the plan


class RecoveryOutcome(Contract):
    """The result of one RecoveryWorkflow: what was decided, what was done, how it ended."""

    workflow_id: str
    cluster: str
    job_id: str
    restart_count: int
    mode: RecoveryMode
    fault_class: FaultClass
    action: RecoveryAction
    recovered: bool
    outcome: RecoveryOutcomeKind
    drained_nodes: list[str] = Field(default_factory=list)
    excluded_nodes: list[str] = Field(default_factory=list)
    requeued: bool = False
    job_running_again: bool = False
    checkpoint: CheckpointVerdict | None = None
    diagnosis: Diagnosis | None = None
    notes: list[str] = Field(default_factory=list)
    would_have: list[str] = Field(default_factory=list)  # observe mode: what act would do
    # Where the next attempt's output begins (the files' sizes while the requeued job was
    # pending, its earlier run gone): the next recovery reads the files from there.
    next_attempt_output: list[OutputMark] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------
# Inputs and outputs of the recovery activities (what the workflow history records).


class RecoveryContext(Contract):
    """The context a recovery works in, read once by ``gather_evidence``: the interruption,
    the job, its nodes, its policy, the mode to run in and the timeouts.

    Payloads carry no class names, so stored histories hold only these fields. The field
    that carries it in :class:`StepInput` and ``contracts.assessment.AssessRequest`` keeps
    its stored name, ``bundle`` (plugin steps read ``ctx.input.bundle``)."""

    interruption: Interruption
    job: JobInfo
    nodes: list[NodeInfo] = Field(default_factory=list)
    policy: JobPolicy
    policy_source: str
    policy_problems: list[str] = Field(default_factory=list)
    mode: RecoveryMode
    wait_running_timeout_s: float
    activity_timeout_s: float
    checkpoint_level: Literal["quick", "full"] = "quick"
    # Whether the job is opted in, as resurrect.policy resolved it when the evidence was
    # gathered; the workflow refuses a job that is not (whoever started the workflow).
    opted_in: bool = False
    # How far apart two reads must be that both show a node unavailable without being DOWN
    # (NOT_RESPONDING, ...) before that counts as Slurm's verdict (watcher.not_responding_grace_s).
    not_responding_grace_s: float = Field(default=NOT_RESPONDING_GRACE_S, ge=0)
    # Set by the recovery, not read: the nodes unavailable without being DOWN that its reads at
    # least ``not_responding_grace_s`` apart all showed so (evidence_trust.UnavailabilityReads);
    # only those, and nodes DOWN, count as Slurm marking a node (evidence_trust.slurm_marked).
    # None: not tracked (a recovery that 0.2.0 started): every unavailable node counts.
    lasting_unavailable: list[str] | None = None


# ---------------------------------------------------------------------------------------
# Recovery steps (built-in and plugin activities run by a recovery plan).


class RecoveryState(Contract):
    """What the recovery has done so far; each step's result is folded into it."""

    drained_nodes: list[str] = Field(default_factory=list)
    excluded_nodes: list[str] = Field(default_factory=list)
    requeued: bool = False
    running_again: bool = False
    checkpoint: CheckpointVerdict | None = None
    next_attempt_output: list[OutputMark] = Field(default_factory=list)


class StepInput(Contract):
    """The one input every plan step receives: the recovery, its parameters, the mode."""

    workflow_id: str
    activity: str
    params: dict[str, Any] = Field(default_factory=dict)
    observe: bool  # observe mode: change nothing, say what would be done
    bundle: RecoveryContext
    diagnosis: Diagnosis
    decision: RecoveryDecision
    state: RecoveryState = Field(default_factory=RecoveryState)
    # Set when the plan gave the step no heartbeat timeout: the worker then heartbeats for
    # it, so a crashed worker is noticed within this many seconds.
    liveness_s: float | None = None
    # Who approved this step (``resurrect approve``), when it waited for approval.
    approved_by: str | None = None
    # Set on a quick step's first attempt, a local activity: finish within this many
    # seconds or raise NeedsMoreTime (the recovery then runs the step as an activity task).
    quick_s: float | None = None

    @property
    def restart_charged(self) -> bool:
        """This recovery requeued the job and charged the restart to the job's budget."""
        return restart_charged(self.state.requeued, self.decision, self.observe)


def restart_charged(requeued: bool | None, decision: RecoveryDecision, observe: bool) -> bool:
    """A requeue charged to the job's restart budget (the recovery's
    ``ResurrectBudgetCharged``; observe mode requeues and charges nothing)."""
    return bool(requeued) and decision.counts_against_budget and not observe


# The ``StepResult.data`` keys that 0.2.0 and 0.2.1 stored for what are now fields.
STORED_STEP_DATA_KEYS = ("approval_needed", "dropped_exclusions")


class StepResult(Contract):
    """What a step reports. Unset fields leave the recovery's state as it was.

    ``approval_needed`` and ``dropped_exclusions`` were once keys of ``data``; a result
    stored in a history of 0.2.x with those keys is read into the fields
    (:meth:`_read_stored_keys`), so stored histories replay unchanged."""

    ok: bool = True
    detail: str = ""
    notes: list[str] = Field(default_factory=list)
    would_have: list[str] = Field(default_factory=list)  # observe mode
    drained_nodes: list[str] = Field(default_factory=list)
    excluded_nodes: list[str] = Field(default_factory=list)
    requeued: bool | None = None
    running_again: bool | None = None
    checkpoint: CheckpointVerdict | None = None
    stop_recovery: bool = False  # end the recovery after this step
    outcome: RecoveryOutcomeKind | None = None  # the outcome to report when stopping
    # Where the next attempt's output begins (see RecoveryOutcome.next_attempt_output).
    next_attempt_output: list[OutputMark] = Field(default_factory=list)
    # The step asks a person before it goes further (a drain over the drain budget): what
    # to approve. The recovery asks, and runs the step again once approved.
    approval_needed: str | None = None
    # Exclusions resurrect gave back at a requeue (no longer excluded).
    dropped_exclusions: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)  # a plugin step's own results

    @model_validator(mode="before")
    @classmethod
    def _read_stored_keys(cls, value: Any) -> Any:
        """Move the ``data`` keys that stored histories (0.2.0, 0.2.1) carry for
        ``approval_needed`` and ``dropped_exclusions`` into those fields."""
        if not isinstance(value, dict) or not isinstance(value.get("data"), dict):
            return value
        data = dict(value["data"])
        moved = {k: data.pop(k) for k in STORED_STEP_DATA_KEYS if k in data}
        if not moved:
            return value
        return {**moved, **value, "data": data}
