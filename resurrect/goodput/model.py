"""What goodput accounting reads (a job's attempts, recoveries, progress) and what it says.

Inputs are facts with their source: Slurm times, Temporal event times, the job's own progress
lines. Outputs split a job's wall time into parts (:data:`PART_NAMES`), each marked
``measured`` (every boundary is an observed timestamp) or ``estimated`` (some boundary was
interpolated from the measured step time), with a note saying how.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Basis = Literal["measured", "estimated"]
PartName = Literal[
    "productive", "startup", "recompute", "detection", "recovery", "queue", "unattributed"
]
# In the order they are shown; every second of wall time is in exactly one of them.
PART_NAMES: tuple[PartName, ...] = (
    "productive",
    "startup",
    "recompute",
    "detection",
    "recovery",
    "queue",
    "unattributed",
)
LOST_PARTS: tuple[PartName, ...] = ("startup", "recompute", "detection", "recovery", "queue")
PART_MEANING: dict[PartName, str] = {
    "productive": "training steps that count (not redone later)",
    "startup": "attempt start until its first training step",
    "recompute": "steps after the checkpoint resumed from, redone after the fault",
    "detection": "last progress before the fault until the recovery started",
    "recovery": "recovery started until the job was requeued (drain, verify, requeue)",
    "queue": "requeued until the job ran again",
    "unattributed": "time no progress signal or recovery event accounts for",
}


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProgressMark(Model):
    """The job said it finished training step ``step`` at ``at``."""

    step: int = Field(ge=0)
    at: datetime


class SaveMark(Model):
    """The job said a checkpoint save started (``done`` False) or ended at ``at``; a done
    line may name the step saved and the seconds the save took."""

    at: datetime
    done: bool
    step: int | None = Field(default=None, ge=0)
    stated_s: float | None = Field(default=None, ge=0)


class Attempt(Model):
    """One run of the job (Slurm restart count ``index``)."""

    index: int = Field(ge=0)
    started_at: datetime | None = None
    marks: list[ProgressMark] = Field(default_factory=list)
    resumed_step: int | None = None  # the step it resumed from, as the job said so


class RecoveryRecord(Model):
    """One recovery workflow, as its Temporal history tells it."""

    workflow_id: str
    cluster: str = ""
    job_id: str = ""
    attempt: int = Field(ge=0)  # the attempt that was interrupted
    fault_class: str = "unknown"
    outcome: str | None = None  # None: still running
    started_at: datetime  # workflow execution started
    first_observed_at: datetime | None = None  # earliest sensor observation of the fault
    requeued_at: datetime | None = None  # the requeue step completed with the job requeued
    running_again_at: datetime | None = None  # the wait step saw the job running again
    closed_at: datetime | None = None
    interrupted_attempt_started_at: datetime | None = None  # from the evidence it gathered
    job_submitted_at: datetime | None = None  # Slurm's submit time then (reset by a requeue)
    resume_step: int | None = None  # the checkpoint step the job resumes from
    drained_nodes: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)
    summary: str = ""


class JobRecord(Model):
    """Everything known about one job, from the scheduler, Temporal and its output."""

    cluster: str
    job_id: str
    submitted_at: datetime | None = None
    ended_at: datetime | None = None  # None: still running (or unknown)
    state: str | None = None  # the scheduler's current state; None: no longer known
    current_attempt: int | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    recoveries: list[RecoveryRecord] = Field(default_factory=list)
    saves: list[SaveMark] = Field(default_factory=list)
    nodes: int | None = Field(default=None, ge=1)  # nodes the job runs on
    notes: list[str] = Field(default_factory=list)


class Segment(Model):
    """One stretch of a job's timeline and the part it counts towards."""

    part: PartName
    start: datetime
    end: datetime
    basis: Basis
    attempt: int

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())


class Part(Model):
    seconds: float
    basis: Basis
    note: str = ""


class RecoveryCost(Model):
    """What one interruption cost, by part (seconds)."""

    workflow_id: str
    attempt: int
    fault_class: str
    outcome: str | None
    started_at: datetime | None = None  # the recovery workflow started
    closed_at: datetime | None = None  # ... and ended (None: still running)
    drained_nodes: list[str] = Field(default_factory=list)
    resume_step: int | None = None
    recomputed_steps: int | None = None
    lost_s: dict[str, float] = Field(default_factory=dict)


class JobGoodput(Model):
    cluster: str
    job_id: str
    state: str | None
    start: datetime | None
    end: datetime | None
    wall_s: float
    since_submit_s: float | None
    goodput: float | None  # productive / wall; None when nothing was measured
    ettr: float | None  # productive / (time since submission)
    step_time_s: float | None
    parts: dict[str, Part]
    recoveries: list[RecoveryCost] = Field(default_factory=list)
    segments: list[Segment] = Field(default_factory=list)
    nodes: int | None = None
    save_s: float | None = None  # median measured checkpoint save (blocking) time
    checkpoint_every_s: float | None = None  # median time between saves ending
    saves_measured: int = 0
    notes: list[str] = Field(default_factory=list)

    @property
    def lost_s(self) -> dict[str, float]:
        return {name: self.parts[name].seconds for name in LOST_PARTS if name in self.parts}


class ClusterGoodput(Model):
    jobs: int
    recoveries: int
    wall_s: float
    goodput: float | None
    ettr: float | None
    parts: dict[str, Part]
