"""The contracts of lemon scoring: one node incident, the scoring rules, a node's score.

Imports only pydantic and the shared contracts, so the node repair workflow (which keeps
each node's incidents) can pass it through the Temporal sandbox.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from resurrect.contracts import Contract

# Who vouches for an incident, most independent first. ``independent``: the node agent
# (kernel log, NVML) or Slurm; ``probe``: resurrect's own probes of the job's processes (a
# hang's or a straggler's culprit without hardware evidence: the job controls its processes);
# ``job_output``: the job's own output alone.
EvidenceTier = Literal["independent", "probe", "job_output"]
IncidentKind = Literal["node_lost", "xid", "ecc", "nvlink", "fabric", "gpu", "hang", "straggler"]


class NodeIncident(Contract):
    """One recovery implicated this node: when, for which job, on what evidence."""

    incident: str = Field(min_length=1, max_length=256)  # the recovery's workflow id
    job_id: str = Field(min_length=1, max_length=64)
    at: datetime
    fault_class: str = Field(max_length=64)
    kind: IncidentKind
    tier: EvidenceTier
    detail: str = Field(default="", max_length=300)  # the evidence, printable, bounded
    # The job's owner (Slurm's uid): one owner's incidents count together. None: recorded
    # before owners were (each such job counts as its own owner).
    owner: str | None = Field(default=None, max_length=64)
    # Whether evidence no job can write vouches for it: NVML's events or readings, Slurm's
    # own node state. (The kernel log is not such evidence: any user can put text in it.)
    hardware: bool = False


class LemonRules(Contract):
    """How incidents are scored (``lemons`` in the configuration)."""

    half_life_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    # A node whose score reaches this is a lemon (flagged, and excluded or drained by policy).
    lemon_score: float = Field(default=2.0, gt=0)
    # A node is due to be drained (policy ``drain``) once this many distinct jobs had an
    # incident on it with independent evidence within ``drain_window_s``.
    drain_incidents: int = Field(default=3, ge=1, le=1000)
    drain_window_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    # The weight of a probe-only incident; independent evidence weighs 1, job output 0.
    probe_weight: float = Field(default=0.1, ge=0, le=0.25)
    # The most one job adds to one node's score (times its heaviest incident's weight),
    # however often it fails there.
    per_job_cap: float = Field(default=1.0, gt=0, le=10)
    # The most one job owner's jobs add together (times their heaviest incident's weight),
    # however many jobs the owner runs there.
    per_owner_cap: float = Field(default=1.0, gt=0, le=10)
    # The in-service fraction below which a node's score is no longer scaled up.
    min_in_service: float = Field(default=0.1, gt=0, le=1)
    keep_incidents: int = Field(default=64, ge=1, le=1000)  # per node, newest kept


class ScoredIncident(Contract):
    incident: NodeIncident
    weight: float  # by its evidence tier
    contribution: float  # weight x decay now, before the per-job cap


class LemonScore(Contract):
    """A node's lemon score now and the incidents behind it."""

    node: str
    score: float
    lemon: bool  # score >= lemon_score, from two owners or with hardware evidence
    drain_due: bool  # drain_incidents distinct jobs with independent evidence in the window,
    # from two owners or with hardware evidence
    in_service: float  # decayed fraction of time in service the score is scaled by
    window_jobs: list[str] = Field(default_factory=list)  # those distinct jobs
    owners: int = 0  # distinct job owners whose incidents count
    hardware: bool = False  # an incident that counts has hardware evidence no job can write
    incidents: list[ScoredIncident] = Field(default_factory=list)  # newest first
