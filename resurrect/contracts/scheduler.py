"""The scheduler's view: job states, jobs, nodes, what a mutation did."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from resurrect.contracts.base import Contract


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
# The state a job shown COMPLETING alone (Slurm 22.05's job state string) is ending in, by
# the reason slurmctld set when it ended the job (later releases print that base state
# beside the COMPLETING flag). A person's scancel leaves the reason as it was ("None").
ENDING_STATE_BY_REASON: dict[str, JobState] = {
    "NonZeroExitCode": JobState.FAILED,
    "RaisedSignal": JobState.FAILED,
    "JobLaunchFailure": JobState.FAILED,
    "NodeDown": JobState.NODE_FAIL,
    "OutOfMemory": JobState.OUT_OF_MEMORY,
    "TimeLimit": JobState.TIMEOUT,
}
# The reason slurmctld gives a job it requeued and held because its launch failed on a node
# (a failing Prolog, a slurmd reporting the job's old step: "Duplicate jobid"), in scontrol's
# and squeue's spellings. Slurm drains that node itself; the hold waits for an operator.
LAUNCH_FAILED_HELD_REASONS = frozenset(
    {"launch_failed_requeued_held", "launch failed requeued held"}
)
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

    @property
    def requeued_while_completing(self) -> bool:
        """Requeued while its attempt is still torn down on its nodes: COMPLETING with
        ``Restarts`` already counting the requeue and no end time (Slurm clears it with the
        requeue and sets StartTime to that moment; an attempt that ended by itself shows
        when it ended)."""
        return (
            self.state is JobState.COMPLETING and self.restart_count > 0 and self.end_time is None
        )

    @property
    def ending_state(self) -> JobState:
        """The job's state, or for an attempt still being torn down (COMPLETING) the state
        its reason says it is ending in (:data:`ENDING_STATE_BY_REASON`); COMPLETING when
        the reason does not say, or when the teardown is a requeue's."""
        if self.state is not JobState.COMPLETING or self.requeued_while_completing:
            return self.state
        return ENDING_STATE_BY_REASON.get(self.state_reason, JobState.COMPLETING)

    @property
    def held_after_failed_launch(self) -> bool:
        """slurmctld requeued and held the job because its launch failed on a node
        (:data:`LAUNCH_FAILED_HELD_REASONS`): a hold of Slurm's own, not a person's."""
        return self.held and self.state_reason in LAUNCH_FAILED_HELD_REASONS

    @property
    def attempt_on_nodes(self) -> int:
        """The restart count of the attempt whose processes hold the job's nodes now: the one
        before ``restart_count`` while a requeue's teardown runs."""
        return self.restart_count - 1 if self.requeued_while_completing else self.restart_count


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
# A node unavailable in another way (NOT_RESPONDING without DOWN, ...) is Slurm's verdict only
# once reads at least this far apart both show it: every node shows NOT_RESPONDING for a
# moment after slurmctld restarts, until its slurmd registers again (the default of
# ``watcher.not_responding_grace_s``).
NOT_RESPONDING_GRACE_S = 4.0


class MutationResult(Contract):
    """What a scheduler mutation did. ``changed`` is False when it was already so (idempotent)."""

    target: str
    operation: str
    changed: bool
    detail: str = ""
