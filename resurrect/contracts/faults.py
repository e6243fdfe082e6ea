"""Fault classes, recovery actions, and the evidence and diagnosis that name them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from resurrect.contracts.base import Contract


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
# Unset: derived from the kind (see resurrect.evidence_trust.evidence_source).
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
