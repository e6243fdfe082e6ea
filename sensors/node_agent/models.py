"""What the node agent reads and concludes locally: readings and health-check verdicts.

What it sends to the control plane (heartbeats, findings, its stop) are NodeHealthWorkflow's
contracts, in :mod:`resurrect.contracts.node_health`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from resurrect.contracts import Contract, FaultClass, RecoveryAction, SignalKind


class Reading(Contract):
    """One observation of the node, rendered as one canonical text line for the rule engine."""

    kind: SignalKind
    source: str  # "nvml", "nvml-event", "kmsg", "journald"
    metric: str  # "xid", "ecc", "row_remap", "lost", "kernel", ...
    text: str
    gpu: str | None = None  # NVML index as text
    pci: str | None = None  # kernel form, e.g. 0000:3b:00
    uuid: str | None = None
    observed_at: datetime


VerdictStatus = Literal["healthy", "unhealthy", "no_gpus"]


class GpuVerdict(Contract):
    """One GPU's health from one check."""

    gpu: str
    pci: str | None = None
    uuid: str | None = None
    healthy: bool
    reasons: list[str] = Field(default_factory=list)
    fault_class: FaultClass | None = None
    action: RecoveryAction | None = None


class NodeVerdict(Contract):
    """The result of ``resurrect agent check``: exit 0 when healthy or no GPUs, 1 when not."""

    node: str
    status: VerdictStatus
    message: str
    gpus: list[GpuVerdict] = Field(default_factory=list)
    node_reasons: list[str] = Field(default_factory=list)  # findings not tied to one GPU
    warnings: list[str] = Field(default_factory=list)
    readings: int = 0
    checked_at: datetime

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "unhealthy" else 0
