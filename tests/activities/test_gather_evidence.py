"""``recovery.gather_evidence``: the job, its nodes and its policy as the recovery judges them.

Slurm may move on before a recovery reads the job: a node failure makes slurmctld requeue
the job at once. The recovery still judges the attempt that was interrupted, on the nodes it
ran on."""

from __future__ import annotations

import pytest
from support.builders import interruption, job
from support.decisions import decision_for

from resurrect.activities.recovery import RecoveryActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    Diagnosis,
    Evidence,
    FaultClass,
    JobState,
    NodeInfo,
    RecoveryAction,
    SignalKind,
)
from resurrect.rules.engine import default_engine
from resurrect.testing import FakeScheduler

INTERRUPTED = job("7", state=JobState.RUNNING, nodes=("node1", "node2"))


def cluster_where_node2_died(now: JobState, nodes: tuple[str, ...]) -> FakeScheduler:
    """Job 7's first attempt lost node2 (Slurm shows it DOWN); slurmctld requeued it: it is
    now attempt 1, ``now`` on ``nodes``."""
    scheduler = FakeScheduler.with_nodes(4, cluster_name="test")
    scheduler.nodes["node2"] = NodeInfo(name="node2", state="DOWN", reason="Not responding")
    scheduler.jobs["7"] = job("7", state=now, nodes=nodes, restart_count=1)
    return scheduler


@pytest.mark.parametrize(
    ("now", "nodes"), [(JobState.PENDING, ()), (JobState.RUNNING, ("node3", "node4"))]
)
async def test_a_job_slurm_requeued_first_is_judged_on_the_nodes_it_lost(
    now: JobState, nodes: tuple[str, ...]
) -> None:
    scheduler = cluster_where_node2_died(now, nodes)
    activities = RecoveryActivities(scheduler, ResurrectConfig(), default_engine())
    bundle = await activities.gather_evidence(interruption("test", INTERRUPTED))
    assert bundle.job.nodes == ["node1", "node2"]  # the interrupted attempt's
    assert (bundle.job.state, bundle.job.restart_count) == (now, 1)  # the rest as read now
    assert {n.name: n.state for n in bundle.nodes}["node2"] == "DOWN"
    lost = Evidence(
        kind=SignalKind.JOB_LOG,
        text="srun: error: Node failure on node2",
        rule="slurm.node_failure",
        role="root",
        fault_class=FaultClass.NODE_LOST,
        host="node2",
    )
    diagnosis = Diagnosis(
        fault_class=FaultClass.NODE_LOST,
        action=RecoveryAction.DRAIN_AND_RESTART,
        confidence=0.9,
        culprit_hosts=["node2"],
        evidence=[lost],
    )
    decision = decision_for(
        diagnosis, bundle.job, bundle.policy, charged_restarts=0, nodes=bundle.nodes
    )
    assert decision.drain_nodes == ["node2"] and "node2" in decision.exclude_nodes


async def test_the_interrupted_attempt_still_read_is_taken_as_read() -> None:
    scheduler = FakeScheduler.with_nodes(4, cluster_name="test")
    scheduler.jobs["7"] = job("7", state=JobState.COMPLETING, nodes=("node1", "node2"))
    activities = RecoveryActivities(scheduler, ResurrectConfig(), default_engine())
    report = interruption("test", INTERRUPTED, nodes=["node1"])  # a sensor that saw one node
    bundle = await activities.gather_evidence(report)
    assert bundle.job == scheduler.jobs["7"]
