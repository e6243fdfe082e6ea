"""The shared data contracts of resurrect.

Everything that crosses a boundary (sensor -> workflow, workflow -> activity, activity ->
scheduler, CLI -> JSON) is one of these pydantic models. This module imports nothing else of
resurrect, so every other module can depend on it without cycles, and workflow code can pass
it through the Temporal sandbox.

Models are strict at the edges: unknown fields are rejected (``extra="forbid"``).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator


class Contract(BaseModel):
    """Base of every contract: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class FaultClass(StrEnum):
    """The attribution vocabulary. The values are public interface: never rename them."""

    GPU_HARDWARE = "gpu.hardware"
    NETWORK_FABRIC = "network.fabric"
    COLLECTIVE_TIMEOUT = "collective.timeout"
    NODE_LOST = "node.lost"
    MEMORY_DEVICE_OOM = "memory.device_oom"
    MEMORY_HOST_OOM = "memory.host_oom"
    CUDA_ERROR = "cuda.error"
    PROCESS_CRASH = "process.crash"
    APP_ERROR = "app.error"
    STORAGE_ERROR = "storage.error"
    JOB_TIME_LIMIT = "job.time_limit"
    JOB_PREEMPTED = "job.preempted"
    JOB_CANCELLED = "job.cancelled"
    JOB_HANG = "job.hang"
    JOB_STRAGGLER = "job.straggler"
    UNKNOWN = "unknown"


class RecoveryAction(StrEnum):
    """What a diagnosis implies should happen to the job."""

    DRAIN_AND_RESTART = "drain_and_restart"
    RESTART = "restart"
    STOP = "stop"
    NONE = "none"


# The default action of each class, as the taxonomy states it.
DEFAULT_ACTION: dict[FaultClass, RecoveryAction] = {
    FaultClass.GPU_HARDWARE: RecoveryAction.DRAIN_AND_RESTART,
    FaultClass.NETWORK_FABRIC: RecoveryAction.DRAIN_AND_RESTART,
    FaultClass.COLLECTIVE_TIMEOUT: RecoveryAction.RESTART,
    FaultClass.NODE_LOST: RecoveryAction.DRAIN_AND_RESTART,
    FaultClass.MEMORY_DEVICE_OOM: RecoveryAction.STOP,
    FaultClass.MEMORY_HOST_OOM: RecoveryAction.STOP,
    FaultClass.CUDA_ERROR: RecoveryAction.RESTART,
    FaultClass.PROCESS_CRASH: RecoveryAction.RESTART,
    FaultClass.APP_ERROR: RecoveryAction.STOP,
    FaultClass.STORAGE_ERROR: RecoveryAction.RESTART,
    FaultClass.JOB_TIME_LIMIT: RecoveryAction.RESTART,
    FaultClass.JOB_PREEMPTED: RecoveryAction.RESTART,
    FaultClass.JOB_CANCELLED: RecoveryAction.NONE,
    FaultClass.JOB_HANG: RecoveryAction.RESTART,
    FaultClass.JOB_STRAGGLER: RecoveryAction.RESTART,
    FaultClass.UNKNOWN: RecoveryAction.RESTART,
}


class SignalKind(StrEnum):
    """Where a piece of evidence came from; rules declare which kinds they apply to."""

    JOB_LOG = "job_log"
    KERNEL_LOG = "kernel_log"
    GPU_EVENT = "gpu_event"
    GPU_METRIC = "gpu_metric"
    SCHEDULER_STATE = "scheduler_state"
    HEARTBEAT = "heartbeat"
    STACK_DUMP = "stack_dump"
    PROGRESS = "progress"


EvidenceRole = Literal["root", "cascade", "diagnostic"]

# Who vouches for a piece of evidence. ``job_output``: lines the job printed (its owner
# controls every byte); ``node_agent``: the node's kernel log, NVML, heartbeats;
# ``scheduler``: Slurm's job and node states; ``sensor``: a report whose origin is neither.
# Unset: derived from the kind (see resurrect.plans.decide.evidence_source).
EvidenceSource = Literal["job_output", "node_agent", "scheduler", "sensor"]


class Evidence(Contract):
    """One observation supporting a diagnosis: a log line, a GPU reading, a scheduler state."""

    kind: SignalKind
    text: str
    rule: str | None = None
    role: EvidenceRole = "diagnostic"
    fault_class: FaultClass | None = None
    file: str | None = None
    line: int | None = None
    host: str | None = None
    rank: int | None = None
    gpu: str | None = None
    fields: dict[str, str] = Field(default_factory=dict)
    observed_at: datetime | None = None
    # The matching rule's weight (0..1); set by the rule engine.
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    source: EvidenceSource | None = None


class Diagnosis(Contract):
    """The attribution of one interruption: exactly one primary class, culprits, evidence."""

    fault_class: FaultClass
    action: RecoveryAction
    confidence: float = Field(ge=0.0, le=1.0)
    culprit_hosts: list[str] = Field(default_factory=list)
    culprit_ranks: list[int] = Field(default_factory=list)
    culprit_gpus: list[str] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    cascade: list[Evidence] = Field(default_factory=list)
    summary: str = ""


class JobState(StrEnum):
    """Slurm base job states resurrect distinguishes (others map to OTHER)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    REQUEUED = "REQUEUED"
    OTHER = "OTHER"


# The sets of job states resurrect decides on; every module imports them from here.
# A job attempt that ended unsuccessfully: the watcher reports it (CANCELLED is a person's
# decision, COMPLETED a success: neither is an interruption).
FAILED_JOB_STATES = frozenset(
    {
        JobState.NODE_FAIL,
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.PREEMPTED,
        JobState.OUT_OF_MEMORY,
        JobState.BOOT_FAIL,
        JobState.DEADLINE,
    }
)
# The job has ended (a requeue starts a new attempt of it).
FINISHED_JOB_STATES = FAILED_JOB_STATES | {JobState.COMPLETED, JobState.CANCELLED}
# The job's ranks run (COMPLETING: its steps are still being torn down).
RUNNING_JOB_STATES = frozenset({JobState.RUNNING, JobState.COMPLETING})
# The job still holds its nodes: running, being torn down, or suspended on them.
ACTIVE_JOB_STATES = RUNNING_JOB_STATES | {JobState.SUSPENDED}


class JobInfo(Contract):
    """What the scheduler knows about one job."""

    job_id: str
    name: str = ""
    state: JobState
    state_reason: str = ""
    user: str = ""
    user_id: int | None = None
    group_id: int | None = None  # the job's primary group (checkpoint access runs as it)
    partition: str = ""
    nodes: list[str] = Field(default_factory=list)
    excluded_nodes: list[str] = Field(default_factory=list)
    num_nodes: int = 0
    restart_count: int = 0
    requeue_allowed: bool = True
    held: bool = False
    comment: str = ""
    # Set by administrators and by resurrect (its hold mark, see scheduler/hold_marker.py).
    # None: this read did not include it (SlurmCli.get_job on 22.05, where it costs one more
    # slurmctld query); the hold-mark paths read it with Scheduler.read_admin_comment.
    admin_comment: str | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None
    work_dir: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    # What resurrect could not make of the scheduler's record of this job (an output
    # pattern that gives no usable path, ...); shown with the job's recovery.
    notes: list[str] = Field(default_factory=list)
    submit_time: datetime | None = None


class NodeInfo(Contract):
    """What the scheduler knows about one node."""

    name: str
    state: str  # base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: list[str] = Field(default_factory=list)  # DRAIN, NOT_RESPONDING, COMPLETING, ...
    reason: str = ""
    partitions: list[str] = Field(default_factory=list)

    @property
    def state_text(self) -> str:
        """State with flags, as sinfo shows it: ``IDLE+DRAIN+NOT_RESPONDING``."""
        return "+".join([self.state, *self.flags])

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags or self.state in {"DRAIN", "DRAINED", "DRAINING"}

    @property
    def unavailable(self) -> bool:
        return (
            self.state in {"DOWN", "FAIL", "FUTURE", "UNKNOWN"}
            or "NOT_RESPONDING" in self.flags
            or "FAIL" in self.flags
        )


# Node base states in which slurmctld itself considers the node gone (not merely drained).
HARD_DOWN_NODE_STATES = frozenset({"DOWN", "FAIL", "FAILING"})


class MutationResult(Contract):
    """What a scheduler mutation did. ``changed`` is False when it was already so (idempotent)."""

    target: str
    operation: str
    changed: bool
    detail: str = ""


RecoveryMode = Literal["observe", "act"]


class ProgressPolicy(Contract):
    """How a job's progress is judged: adaptive hang detection and straggler handling.

    A job is suspected hung when its progress (steps, checkpoint writes) stops for longer
    than max(``hang_floor_s``, ``hang_k`` x its recent step interval), or the allowance of
    the phase it is in (start-up, checkpoint save, evaluation). A suspicion is confirmed by
    the ranks' stacks; without stacks, silence past ``hang_unconfirmed_s`` is a hang too.
    A rank slower than its peers by at least the fraction ``straggler_threshold`` (from
    per-rank step times, or from how much its peers wait for it) for ``straggler_duration_s``
    is a straggler; ``straggler_action`` restart acts only when a restart pays off.
    See docs/hangs-and-stragglers.md."""

    hang_detection: bool = True
    hang_floor_s: float = Field(default=5.0, ge=5.0)
    hang_k: float = Field(default=3.0, ge=2.0)
    startup_s: float = Field(default=1800.0, ge=60.0)
    checkpoint_s: float = Field(default=900.0, ge=30.0)
    eval_s: float = Field(default=1800.0, ge=30.0)
    hang_unconfirmed_s: float = Field(default=900.0, ge=60.0)
    straggler_threshold: float = Field(default=0.25, ge=0.05, le=1.0)
    straggler_duration_s: float = Field(default=120.0, ge=10.0)
    straggler_action: Literal["notify", "restart"] = "notify"


class JobPolicy(Contract):
    """A job's recovery policy: the partition's (or the cluster default), narrowed by the
    job's opt-in comment.

    The comment is written by the job's owner, so it may only make recovery *more
    conservative* than the policy the operator configured (:mod:`resurrect.policy` applies
    this, field by field, and notes every request it did not grant):

    ==========================  ==========================================================
    field                       what a comment may do
    ==========================  ==========================================================
    enabled                     opt in (``true`` / an object) or out (``false``); any
                                malformed comment means *not* opted in
    mode                        lower it (``observe``), never raise it to ``act``
    max_restarts                lower it, never raise it above the operator's value
    allow_restart_from_scratch  turn it off, never on
    hang_after_s                turn hang detection on for its own job, or lengthen it;
                                never shorten the operator's value (floor 30 s)
    checkpoint_dir              name it (the job's own files; ownership is checked where
                                it is used)
    notify                      add recipients; the operator's recipients stay
    progress                    raise thresholds and allowances, turn hang detection off,
                                ``notify`` instead of ``restart`` for stragglers; never
                                the other way
    ==========================  ==========================================================
    """

    enabled: bool = True
    mode: RecoveryMode | None = None  # None: the cluster's mode
    max_restarts: int = Field(default=3, ge=0, le=1000)
    checkpoint_dir: str | None = Field(
        default=None, min_length=1, max_length=4096, pattern=r"^/[^\x00]*$"
    )
    allow_restart_from_scratch: bool = True
    notify: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list, max_length=16
    )
    # A running job whose output and checkpoints stay still this long is hung (None: off).
    hang_after_s: float | None = Field(default=None, ge=30, le=30 * 24 * 3600)
    progress: ProgressPolicy = Field(default_factory=ProgressPolicy)


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

    @property
    def workflow_id(self) -> str:
        return recovery_workflow_id(self.cluster, self.job_id, self.restart_count)


def recovery_workflow_id(cluster: str, job_id: str, restart_count: int) -> str:
    """The identity of a recovery: one workflow per (cluster, job, attempt)."""
    return f"recover/{cluster}/{job_id}/{restart_count}"


# Fields of the decision removed in 0.x that steps scheduled by older workers still carry.
RETIRED_DECISION_FIELDS = frozenset({"cancel_running_job", "verify_checkpoint"})


class RecoveryDecision(Contract):
    """What this recovery will do, decided from the diagnosis, the job's policy and budget.

    Per incident (``resurrect.plans.decide``); not to be confused with the YAML recovery
    plans (``resurrect.plans``), whose steps carry the decision out.
    """

    action: RecoveryAction
    drain_nodes: list[str] = Field(default_factory=list)
    exclude_nodes: list[str] = Field(default_factory=list)
    requeue: bool = False
    counts_against_budget: bool = True
    reasons: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _drop_retired_fields(cls, data: Any) -> Any:
        """A step scheduled before 0.x's clean-up carries two fields nothing ever read:
        accept them (the step runs as it would have), keep refusing anything else."""
        if isinstance(data, dict) and RETIRED_DECISION_FIELDS & data.keys():
            return {k: v for k, v in data.items() if k not in RETIRED_DECISION_FIELDS}
        return data


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
    JOB_COMPLETED = "job_completed"  # the job had finished by the time of the requeue
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


# ---------------------------------------------------------------------------------------
# Inputs and outputs of the recovery activities (what the workflow history records).


class EvidenceBundle(Contract):
    """What ``gather_evidence`` found: the job, its nodes, its policy, the mode to run in."""

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
    # Set by workers that try ``recovery.assess`` and the quick plan steps first as local
    # activities of a few seconds (``quick_s``), then as activity tasks (the recovery reads
    # it from this recorded result, so recoveries recorded before it replay unchanged).
    local_first: bool = False


class AttributeRequest(Contract):
    bundle: EvidenceBundle
    reported: list[Evidence] = Field(default_factory=list)  # evidence other sensors sent


class ChargedRestartsRequest(Contract):
    cluster: str
    job_id: str
    current_workflow_id: str


# ---------------------------------------------------------------------------------------
# Recovery steps (built-in and plugin activities run by a recovery plan).


class IncidentState(Contract):
    """What the recovery has done so far; each step's result is folded into it."""

    drained_nodes: list[str] = Field(default_factory=list)
    excluded_nodes: list[str] = Field(default_factory=list)
    requeued: bool = False
    running_again: bool = False
    checkpoint: CheckpointVerdict | None = None


class StepInput(Contract):
    """The one input every plan step receives: the incident, its parameters, the mode."""

    workflow_id: str
    activity: str
    params: dict[str, Any] = Field(default_factory=dict)
    dry_run: bool
    bundle: EvidenceBundle
    diagnosis: Diagnosis
    # "plan" until 0.x: a step scheduled by an older worker still reads on a newer one.
    decision: RecoveryDecision = Field(validation_alias=AliasChoices("decision", "plan"))
    state: IncidentState = Field(default_factory=IncidentState)
    # Set when the plan gave the step no heartbeat timeout: the worker then heartbeats for
    # it, so a crashed worker is noticed within this many seconds.
    liveness_s: float | None = None
    # Who approved this step (``resurrect approve``), when it waited for approval.
    approved_by: str | None = None
    # Set on a quick step's first attempt, a local activity: finish within this many
    # seconds or raise NeedsMoreTime (the recovery then runs the step as an activity task).
    quick_s: float | None = None


class StepResult(Contract):
    """What a step reports. Unset fields leave the incident state as it was."""

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
    data: dict[str, Any] = Field(default_factory=dict)
