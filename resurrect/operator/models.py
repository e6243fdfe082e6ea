"""Contracts of operator control, shared by workflows, activities and the CLI."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from resurrect.contracts import Contract
from resurrect.lemons.models import LemonRules, NodeIncident

# ---------------------------------------------------------------------------- budget


class DrainCandidate(Contract):
    """A node a recovery wants to drain, with the partitions it belongs to."""

    name: str
    partitions: list[str] = Field(default_factory=list)


class BudgetLimits(Contract):
    """How many distinct nodes may be drained within one window, per scope."""

    window_s: float
    cluster: int
    partitions: dict[str, int] = Field(default_factory=dict)


class DrainReservation(Contract):
    """``reserve_drains``: may this recovery drain these nodes now?"""

    workflow_id: str
    job_id: str
    nodes: list[DrainCandidate]
    limits: BudgetLimits
    # Set when a person approved draining over the budget (``resurrect approve``).
    approved_by: str | None = None
    # Nodes resurrect drained that are still out of service (from Slurm, whenever drained):
    # each counts against the budget until it returns, whatever the window.
    held: list[DrainCandidate] = Field(default_factory=list)


class HeldCensus(Contract):
    """The nodes resurrect drained that are still out of service, as one read of the
    scheduler found them at ``read_at``."""

    read_at: datetime
    nodes: list[DrainCandidate] = Field(default_factory=list)


class CensusReservations(Contract):
    """``reserve_drains_census``: reservations (their ``held`` left empty) decided against the
    census of held nodes the budget keeps, at least as new as ``census_at``. The sender
    carries the census (``held``) only when the budget does not keep it yet: once per census
    read, not once per reservation (a burst that drained hundreds of nodes made each
    reservation carry them all)."""

    requests: list[DrainReservation]
    census_at: datetime  # when the sender's census was read
    held: list[DrainCandidate] | None = None  # that census; None: the budget keeps it


class DrainRecord(Contract):
    """One drain charged to the budget (kept while it is inside the window)."""

    node: str
    partitions: list[str] = Field(default_factory=list)
    workflow_id: str
    job_id: str
    at: datetime
    approved_by: str | None = None


class DrainGrant(Contract):
    """The budget's answer: which of the nodes may be drained, and why not the others."""

    granted: list[str] = Field(default_factory=list)
    denied: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)
    # This answer tripped the breaker (the first denial since it last had room).
    tripped: bool = False
    # The granted nodes this answer charged to the window: no reservation of the window
    # (this recovery's own included) had named them. None: the answer does not say.
    recorded: list[str] | None = None


class BudgetState(Contract):
    """The budget workflow's whole state (carried over continue-as-new)."""

    cluster: str
    records: list[DrainRecord] = Field(default_factory=list)
    limits: BudgetLimits | None = None  # as the last reservation gave them
    tripped: bool = False
    trips: int = 0
    last_trip_at: datetime | None = None
    denied_total: int = 0


class BudgetUse(Contract):
    node: str
    job_id: str
    workflow_id: str
    at: datetime
    frees_at: datetime
    approved_by: str | None = None


class BudgetScope(Contract):
    """One budget (the cluster, or one partition) as ``resurrect budget`` shows it."""

    scope: str
    limit: int
    used: int
    window_s: float
    uses: list[BudgetUse] = Field(default_factory=list)
    next_free_at: datetime | None = None  # when the oldest use leaves the window


class BudgetView(Contract):
    cluster: str
    tripped: bool
    trips: int
    last_trip_at: datetime | None = None
    scopes: list[BudgetScope] = Field(default_factory=list)


class BudgetTripNotice(Contract):
    """What the budget workflow tells operators, once per trip."""

    cluster: str
    trip: int
    at: datetime
    workflow_id: str
    job_id: str
    denied: list[str]
    reasons: list[str]


# ---------------------------------------------------------------------------- approvals


class ApprovalProof(Contract):
    """An operator's signature on one answer: HMAC-SHA256 under the operator's own key
    (``resurrect/operator/approval_auth.py``), checked by the worker before the recovery
    takes the answer."""

    operator: str = Field(min_length=1, max_length=64)
    issued_at: datetime
    mac: str = Field(pattern=r"^[0-9a-f]{64}$")


class ApprovalInput(Contract):
    """``resurrect approve|deny``: who decided and why. ``by`` is the operator the proof
    names when there is one (the worker refuses any other), else an unverified claim."""

    by: str = Field(min_length=1, max_length=128)
    reason: str = Field(default="", max_length=2000)
    proof: ApprovalProof | None = None


# ---------------------------------------------------------------------------- repair

NodeEventKind = Literal[
    "drained",
    "check_passed",
    "check_failed",
    "returned",
    "not_ours",
    "flagged",
    "excluded",
    "included",
]
NodeStatus = Literal[
    "in_service", "cooling_down", "checking", "drained_unhealthy", "flagged", "left_alone"
]


class NodeEvent(Contract):
    at: datetime
    kind: NodeEventKind
    detail: str = ""
    incident: str | None = None
    job_id: str | None = None


class NodeDrainReport(Contract):
    """Signal to a node's repair workflow: resurrect drained (or excluded) this node."""

    incident: str
    job_id: str
    fault_class: str
    reason: str
    # drained: resurrect drained it; excluded / included: resurrect added it to (removed it
    # from) the job's exclusion list.
    kind: Literal["drained", "excluded", "included"] = "drained"
    # Drained for its lemon record (the job's lemon policy ``drain``): it stays out, flagged.
    lemon: bool = False


class NodeIncidentReport(Contract):
    """Signal to a node's repair workflow: a recovery implicated this node (its lemon
    record), with the scoring rules in force."""

    incident: NodeIncident
    rules: LemonRules


class RepairTimings(Contract):
    cool_down_s: float
    check_timeout_s: float
    recheck_interval_s: float
    max_checks: int
    probation_s: float


class NodeRepairState(Contract):
    cluster: str
    node: str
    timings: RepairTimings
    status: NodeStatus = "in_service"
    checks: int = 0
    drains: int = 0
    returns: int = 0
    flagged: bool = False
    returned_at: datetime | None = None
    # job id -> when resurrect added this node to the job's exclusion list
    exclusions: dict[str, datetime] = Field(default_factory=dict)
    events: list[NodeEvent] = Field(default_factory=list)
    pending: list[NodeDrainReport] = Field(default_factory=list)
    # The node's lemon record: incidents recoveries reported (resurrect/lemons), bounded, and
    # the scoring rules the last report carried.
    incidents: list[NodeIncident] = Field(default_factory=list)
    lemon_rules: LemonRules | None = None

    def drained_by(self, incident: str) -> bool:
        """Whether the recovery ``incident`` drained this node: its drain report is waiting
        (``pending``) or was taken up (a ``drained`` event)."""
        return any(p.incident == incident for p in self.pending) or any(
            e.kind == "drained" and e.incident == incident for e in self.events
        )


class NodeCheck(Contract):
    """What ``repair.check_node`` found."""

    node: str
    drained_by_resurrect: bool
    drained: bool
    reason: str = ""
    healthy: bool = False
    detail: str = ""


class NodeFlag(Contract):
    cluster: str
    node: str
    why: str
    events: list[NodeEvent] = Field(default_factory=list)
