"""Settings of the node agent (the ``agent:`` section of resurrect's configuration)."""

from __future__ import annotations

import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


def default_node_name() -> str:
    """The short host name, which is what Slurm calls the node on most clusters."""
    return socket.gethostname().split(".", 1)[0]


class AgentSettings(BaseModel):
    """How often the agent reads the GPUs, reports liveness, and how loudly it may report.

    Embedded in the global configuration as ``agent:``; every field has a working default.
    """

    model_config = ConfigDict(extra="forbid")

    node_name: str = Field(default_factory=default_node_name, min_length=1)
    # NVML counters and states are polled at this interval; Xid events arrive through the
    # NVML event API as they happen (waited on in slices of event_wait_ms).
    interval_s: float = Field(default=5.0, gt=0)
    event_wait_ms: int = Field(default=1000, ge=10, le=60_000)
    # NVML missing at start because the driver was still loading: try again this often.
    nvml_retry_s: float = Field(default=60.0, gt=0)
    # Liveness: the agent signals a heartbeat this often; the node's health workflow treats
    # the node as lost when none arrived for silence_threshold_s.
    heartbeat_interval_s: float = Field(default=2.0, gt=0)
    silence_threshold_s: float = Field(default=6.0, gt=0)
    # NVLink error counters are compared over this window (deltas, not lifetime totals).
    nvlink_window_s: float = Field(default=60.0, gt=0)
    # De-duplication: one finding per (GPU, rule) per window; a global cap per minute.
    dedup_window_s: float = Field(default=300.0, ge=0)
    max_findings_per_minute: int = Field(default=30, ge=1)
    # Kernel log: /dev/kmsg when readable, else this journald command (kernel messages only).
    kernel_log: bool = True
    kmsg_path: Path = Path("/dev/kmsg")
    journal_argv: list[str] = Field(
        default_factory=lambda: ["journalctl", "-k", "-f", "-n", "0", "-o", "cat"]
    )
    # Liveness collector ("host:port"; see the config's ``liveness`` section): heartbeats go
    # there, authenticated with collector_key_file; with no acknowledgement for
    # collector_fallback_s they also go to Temporal. None: heartbeat Temporal directly.
    collector: str | None = None
    collector_key_file: Path = Path("/etc/resurrect/liveness.key")
    collector_fallback_s: float = Field(default=5.0, gt=0)
    # Health workflow history bound: continue-as-new after this many signals.
    max_signals_per_run: int = Field(default=500, ge=10)
