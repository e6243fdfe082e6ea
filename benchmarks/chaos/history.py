"""What the soak records: the faults it injected, the jobs it ran, the recoveries resurrect
ran, periodic samples of the cluster and of resurrect's processes, and each job's goodput.
The invariants (``invariants.py``) and the figures (``figures.py``) read only this."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class FaultRecord:
    """One injection as it happened (``skipped``: why it found nothing to hit)."""

    index: int
    kind: str
    at: float  # unix time of the injection
    job_id: str | None = None
    node: str | None = None
    # jobs that had a step on the faulted node, or the faulted job
    affected_jobs: list[str] = field(default_factory=list)
    skipped: str | None = None
    ended_at: float | None = None  # when the soak undid it (a restarted process, ...)
    detail: str = ""


@dataclass
class JobRun:
    """One submitted job and how it ended."""

    job_id: str
    shape: str  # "torchrun-2n", "srun-2n", ... (the fault-free reference is per shape)
    opted_in: bool
    max_restarts: int
    submitted_at: float
    final_state: str | None = None  # None: had not ended when the soak stopped waiting
    ended_at: float | None = None
    restart_count: int = 0
    final_sha: str | None = None
    reference_sha: str | None = None
    # (node an earlier attempt lost, node whose step its srun cancelled): ``leftovers.py``
    leftover_cancellations: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Recovery:
    """One recovery workflow (read from Temporal)."""

    workflow_id: str
    job_id: str
    started_at: float
    closed_at: float | None = None
    status: str = "running"  # Temporal's execution status, lower case
    outcome: str | None = None  # RecoveryOutcomeKind value; None: no outcome recorded
    fault_class: str = "unknown"
    requeued: bool = False
    drained_nodes: list[str] = field(default_factory=list)
    running_again_at: float | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class JobSample:
    state: str
    restarts: int
    held: bool


@dataclass
class Sample:
    """The cluster at one moment: every job of the soak, the nodes resurrect has drained."""

    at: float
    jobs: dict[str, JobSample] = field(default_factory=dict)
    drained: dict[str, str] = field(default_factory=dict)  # node -> drain reason
    # rank processes of attempts older than their job's current one, alive (not zombies):
    # job id -> [(attempt, pid, /proc state letter)]
    old_ranks: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)
    # live rank processes on each node under an injected fault: [(job, attempt, pid, state)]
    faulted_node_ranks: dict[str, list[tuple[str, int, int, str]]] = field(default_factory=dict)


@dataclass
class ProcessLife:
    """One process of resurrect (worker, watcher, an agent, ...) from start to kill or end."""

    part: str
    pid: int
    started_at: float
    ended_at: float | None = None  # None: alive when the soak ended
    rss_kb: list[tuple[float, int]] = field(default_factory=list)


@dataclass
class JobGoodputRecord:
    job_id: str
    wall_s: float
    parts: dict[str, float]  # every part, productive and unattributed included


@dataclass
class History:
    """Everything one soak recorded."""

    seed: int
    started_at: float
    ended_at: float
    drain_limit: int  # the most nodes resurrect may have drained at once
    warmup_s: float  # RSS is compared from this long after a process started
    faults: list[FaultRecord] = field(default_factory=list)
    jobs: list[JobRun] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    processes: list[ProcessLife] = field(default_factory=list)
    goodput: list[JobGoodputRecord] = field(default_factory=list)
    # job id -> [(checkpoint file, mtime)] at the end (hosts in namespaces)
    checkpoint_files: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    # node -> times resurrect's repair workflow returned it to service (its "returned" events)
    returned_by_repair: dict[str, list[float]] = field(default_factory=dict)

    def job(self, job_id: str) -> JobRun | None:
        return next((j for j in self.jobs if j.job_id == job_id), None)

    def faults_on(self, job_id: str) -> list[FaultRecord]:
        """Injected (not skipped) faults that hit ``job_id``."""
        return [f for f in self.faults if f.skipped is None and job_id in f.affected_jobs]

    def recoveries_of(self, job_id: str) -> list[Recovery]:
        return sorted(
            (r for r in self.recoveries if r.job_id == job_id), key=lambda r: r.started_at
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def load_history(data: dict[str, Any]) -> History:
    """A :class:`History` from :meth:`History.to_json`'s dict (a saved soak's history.json):
    the invariants and figures can be drawn again from it."""
    samples = [
        Sample(
            at=s["at"],
            jobs={jid: JobSample(**j) for jid, j in s["jobs"].items()},
            drained=s["drained"],
            old_ranks={
                jid: [(a, p, st) for a, p, st in ranks]
                for jid, ranks in s.get("old_ranks", {}).items()
            },
            faulted_node_ranks={
                node: [(j, a, p, st) for j, a, p, st in ranks]
                for node, ranks in s.get("faulted_node_ranks", {}).items()
            },
        )
        for s in data["samples"]
    ]
    processes = [
        ProcessLife(**{**p, "rss_kb": [(t, kb) for t, kb in p["rss_kb"]]})
        for p in data["processes"]
    ]
    scalars = {k: v for k, v in data.items() if not isinstance(v, list | dict)}
    return History(
        **scalars,
        faults=[FaultRecord(**f) for f in data["faults"]],
        jobs=[JobRun(**j) for j in data["jobs"]],
        recoveries=[Recovery(**r) for r in data["recoveries"]],
        samples=samples,
        processes=processes,
        goodput=[JobGoodputRecord(**g) for g in data["goodput"]],
        checkpoint_files={
            jid: [(f, t) for f, t in files]
            for jid, files in data.get("checkpoint_files", {}).items()
        },
        returned_by_repair=data.get("returned_by_repair", {}),
    )
