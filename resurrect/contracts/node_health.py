"""The contracts of NodeHealthWorkflow: its names, its signals' and query's models, the
input and output of its activity.

The node agent (a sensor) sends these; the workflow (workflows/node_health.py) and its
activity (activities/node_health.py) receive them; none of the three imports another for
them. Like :mod:`resurrect.contracts`, this module imports only pydantic and the shared
contracts, so the workflow can pass it through the Temporal sandbox.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from resurrect.contracts import Contract, Evidence, FaultClass

# Names by which the control plane knows the node health workflow and its parts.
NODE_HEALTH_WORKFLOW = "NodeHealthWorkflow"
HEARTBEAT_SIGNAL = "heartbeat"
FINDINGS_SIGNAL = "findings"
AGENT_STOPPED_SIGNAL = "agent_stopped"
NODE_SILENT_SIGNAL = "node_silent"  # from the liveness collector (sensors.liveness)
HEALTH_QUERY = "health"
REPORT_NODE_FAULT_ACTIVITY = "node_health.report_node_fault"


class NodeHeartbeat(Contract):
    """The agent is alive; sent every heartbeat interval."""

    node: str
    seq: int = Field(ge=0)
    sent_at: datetime
    gpus: int = Field(default=0, ge=0)
    nvml: str = "ok"  # "ok", or why NVML is not watched ("library missing", "no GPUs", ...)
    silence_threshold_s: float = Field(default=6.0, gt=0)
    # Forwarded by the liveness collector, which watches this node's silence itself: the
    # workflow keeps no silence timer until a heartbeat without this flag arrives.
    watched_by_collector: bool = False


class NodeSilent(Contract):
    """The liveness collector heard nothing from the node's agent for its threshold."""

    node: str
    last_heartbeat_at: datetime
    last_seq: int = Field(ge=0)
    silent_for_s: float = Field(ge=0)
    silence_threshold_s: float = Field(gt=0)


class NodeFindings(Contract):
    """Evidence the agent's rules produced, already de-duplicated and rate-limited."""

    node: str
    sent_at: datetime
    evidence: list[Evidence]


class AgentStopped(Contract):
    """The agent is stopping on purpose (systemd stop); silence after this is not a fault."""

    node: str
    sent_at: datetime
    reason: str = "stopped"


class NodeHealthInput(Contract):
    """Start (and continue-as-new) input of the node health workflow."""

    cluster: str
    node: str
    silence_threshold_s: float = Field(default=6.0, gt=0)
    report_dedup_s: float = Field(default=300.0, ge=0)
    max_signals_per_run: int = Field(default=500, ge=10)
    carried: NodeHealth | None = None


NodeStatus = Literal["unknown", "healthy", "degraded", "faulty", "silent", "stopped"]


class NodeHealth(Contract):
    """What the node health workflow knows about its node (its ``health`` query)."""

    cluster: str
    node: str
    status: NodeStatus = "unknown"
    last_heartbeat_at: datetime | None = None
    last_seq: int = -1
    gpus: int = 0
    nvml: str = "unknown"
    silent_since: datetime | None = None
    findings: list[Evidence] = Field(default_factory=list)  # latest per (gpu, rule), bounded
    reported_jobs: list[str] = Field(default_factory=list)  # recovery workflow ids, bounded
    reported_at: dict[str, datetime] = Field(default_factory=dict)  # "gpu|rule" -> last report
    faults_reported: int = 0
    stall_graces: int = 0  # silence timers that fired late (control plane stalled)
    watched_by_collector: bool = False  # silence is the liveness collector's to decide


class NodeFaultReport(Contract):
    """The activity's input: the node is faulty (root finding) or lost (silent agent)."""

    cluster: str
    node: str
    fault_class: FaultClass
    reason: str
    observed_at: datetime
    evidence: list[Evidence] = Field(default_factory=list)


class NodeFaultResult(Contract):
    """What the activity did: the recoveries it started or signalled."""

    node: str
    jobs_on_node: list[str] = Field(default_factory=list)
    reported: list[str] = Field(default_factory=list)  # recovery workflow ids
    skipped: list[str] = Field(default_factory=list)  # "job 12: not opted in", ...


NodeHealthInput.model_rebuild()
