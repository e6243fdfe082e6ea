"""A burst of node losses for tests and benchmarks: running 2-node jobs whose second node is
down, and what each sensor reports about them (as the real sensors do)."""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import UTC, datetime

from resurrect.contracts import (
    Evidence,
    EvidenceRole,
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    NodeInfo,
    SignalKind,
)
from resurrect.scheduler.base import active_only, census_of
from resurrect.scheduler.validation import validate_job_id, validate_node_name
from resurrect.testing.fake_scheduler import FakeScheduler

# The sensors that report a node loss: the Slurm watcher (states only, no evidence of its
# own), the node agent (its silence) and the log follower (the ranks' cascade).
SOURCES = ("slurm_watcher", "node_agent", "log_tail")
OPT_IN = json.dumps({"resurrect": {"max_restarts": 3}})


class IndexedFakeScheduler(FakeScheduler):
    """The in-memory cluster answering reads by name and id, as the Slurm CLI backend does
    (the watcher's view of :class:`~resurrect.scheduler.base.Scheduler`, ``get_job``,
    ``get_node``): in a burst
    each recovery reads its own job and nodes, not a copy of the whole cluster."""

    async def list_active_jobs(self, also: Collection[str] = ()) -> list[JobInfo]:
        self._maybe_fail()
        return active_only(self.jobs.values(), also)

    async def list_unhealthy_nodes(self) -> list[NodeInfo]:
        self._maybe_fail()
        return [node for node in self.nodes.values() if node.unavailable]

    async def list_nodes_named(self, names: Collection[str]) -> list[NodeInfo]:
        self._maybe_fail()
        return [self.nodes[name] for name in names if name in self.nodes]

    async def get_node(self, name: str) -> NodeInfo:
        self._maybe_fail()
        return self._node(validate_node_name(name))

    async def get_job(self, job_id: str) -> JobInfo:
        self._maybe_fail()
        return self._job(validate_job_id(job_id))

    async def drain_census(self) -> tuple[int, list[NodeInfo]]:
        self._maybe_fail()
        return census_of(self.nodes.values())


def lost_node_cluster(
    jobs: int, cluster_name: str, *, first_job_id: int = 1000
) -> IndexedFakeScheduler:
    """``jobs`` running jobs on nodes ``aNNNNN`` + ``bNNNNN``, every ``b`` node down, and two
    idle spare nodes per job."""
    scheduler = IndexedFakeScheduler(cluster_name=cluster_name)
    for index in range(jobs):
        up, down = f"a{index:05d}", f"b{index:05d}"
        scheduler.nodes[up] = NodeInfo(name=up, state="ALLOCATED")
        scheduler.nodes[down] = NodeInfo(name=down, state="DOWN", flags=["NOT_RESPONDING"])
        job_id = str(first_job_id + index)
        scheduler.jobs[job_id] = JobInfo(
            job_id=job_id,
            name="train",
            state=JobState.RUNNING,
            user="alice",
            nodes=[up, down],
            num_nodes=2,
            comment=OPT_IN,
        )
    for index in range(2 * jobs):
        scheduler.nodes[f"spare{index:05d}"] = NodeInfo(name=f"spare{index:05d}", state="IDLE")
    return scheduler


# What the node agent and the log follower send with a node loss: kind, text, rule, role,
# class (the text names the lost node).
_EVIDENCE: dict[str, tuple[SignalKind, str, str, EvidenceRole, FaultClass]] = {
    "node_agent": (
        SignalKind.HEARTBEAT,
        "node agent on {lost} silent for 6.0s (threshold 6.0s)",
        "node_agent.heartbeat_silence",
        "root",
        FaultClass.NODE_LOST,
    ),
    "log_tail": (
        SignalKind.JOB_LOG,
        "[rank1]: Connection closed by peer [{lost}]:29500",
        "gloo.connection_closed",
        "cascade",
        FaultClass.COLLECTIVE_TIMEOUT,
    ),
}


def sensor_evidence(source: str, lost: str, now: datetime) -> list[Evidence]:
    """What ``source`` sends with its report of ``lost`` (the Slurm watcher: nothing)."""
    if source not in _EVIDENCE:
        return []
    kind, text, rule, role, fault = _EVIDENCE[source]
    host = lost if kind is SignalKind.HEARTBEAT else None  # the agent speaks for its node
    return [
        Evidence(
            kind=kind,
            text=text.format(lost=lost),
            rule=rule,
            role=role,
            fault_class=fault,
            host=host,
            observed_at=now,
        )
    ]


def node_loss_reports(scheduler: FakeScheduler, source: str) -> list[Interruption]:
    """``source``'s report of every job of ``scheduler`` (its second node lost)."""
    now = datetime.now(UTC)
    return [
        Interruption(
            cluster=scheduler.cluster_name,
            job_id=job.job_id,
            restart_count=0,
            source=source,
            reason=f"{source}: node {job.nodes[1]} lost",
            observed_at=now,
            job_state=JobState.RUNNING,
            nodes=list(job.nodes),
            suspect_nodes=[job.nodes[1]],
            fault_hint=FaultClass.NODE_LOST,
            evidence=sensor_evidence(source, job.nodes[1], now),
        )
        for job in scheduler.jobs.values()
    ]
