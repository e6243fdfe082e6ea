"""Attack 13: whoever can start a workflow could have any job recovered.

The sensors only report opted-in jobs, but the RecoveryWorkflow itself never looked: anyone
able to start a workflow on the task queue (a Temporal client) could have any job on the
cluster drained around and requeued. The workflow now resolves the job's policy itself
(``recovery.gather_evidence`` calls :func:`resurrect.policy.resolve_job_policy` on the job
as the scheduler shows it) and refuses a job that is not opted in, changing nothing.

Real Temporal dev server, real activities, a fake scheduler.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.builders import interruption, make_config
from support.recovery import recover
from support.workers import resurrect_workers
from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import Interruption, JobInfo, JobPolicy, JobState
from resurrect.testing import FakeScheduler

pytestmark = pytest.mark.temporal


def config_for(tmp_path: Path) -> ResurrectConfig:
    """Recovery acts; partition ``opted`` opts its jobs in by default."""
    return make_config(
        tmp_path,
        mode="act",
        policy={"partitions": {"opted": JobPolicy().model_dump()}},
        recovery={"wait_running_timeout_s": 10, "activity_timeout_s": 10},
    )


def forged_report(config: ResurrectConfig, job: JobInfo) -> Interruption:
    """What a hostile Temporal client sends: a plausible node failure of someone's job."""
    return interruption(config.cluster.name, job, source="slurm_watcher", suspect_nodes=["node2"])


def victim(job_id: str, *, comment: str = "", partition: str = "batch") -> JobInfo:
    return JobInfo(
        job_id=job_id,
        state=JobState.NODE_FAIL,
        user="bob",
        user_id=1001,
        partition=partition,
        nodes=["node1", "node2"],
        num_nodes=2,
        comment=comment,
    )


@pytest.mark.parametrize(
    ("comment", "partition"),
    [
        ("", "batch"),  # never opted in (the cluster default is opt-in only)
        (json.dumps({"resurrect": False}), "opted"),  # opted out of its partition's default
        ("run 7 of the sweep", "batch"),  # a comment that is not about resurrect
    ],
)
async def test_a_forged_report_for_a_job_not_opted_in_is_refused(
    temporal_client: Client, tmp_path: Path, comment: str, partition: str
) -> None:
    config = config_for(tmp_path)
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    scheduler.nodes["node2"] = scheduler.nodes["node2"].model_copy(update={"state": "DOWN"})
    scheduler.jobs["300"] = victim("300", comment=comment, partition=partition)
    nodes_before = dict(scheduler.nodes)
    job_before = scheduler.jobs["300"]
    async with resurrect_workers(temporal_client, config, scheduler):
        outcome = await recover(temporal_client, config, forged_report(config, job_before))
    assert outcome.outcome == "refused_not_opted_in", outcome.notes
    assert not outcome.requeued and not outcome.drained_nodes and not outcome.recovered
    assert any("not opted in" in note and "nothing was changed" in note for note in outcome.notes)
    assert scheduler.calls == []
    assert scheduler.nodes == nodes_before and scheduler.jobs["300"] == job_before


async def test_an_opted_in_job_is_still_recovered(temporal_client: Client, tmp_path: Path) -> None:
    config = config_for(tmp_path)
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    scheduler.nodes["node2"] = scheduler.nodes["node2"].model_copy(update={"state": "DOWN"})
    scheduler.jobs["301"] = victim("301", partition="opted")  # opted in by its partition
    async with resurrect_workers(temporal_client, config, scheduler):
        outcome = await recover(
            temporal_client, config, forged_report(config, scheduler.jobs["301"])
        )
    assert outcome.outcome == "recovered", outcome.notes
    assert scheduler.calls == [
        ("drain", "node2"),
        ("requeuehold", "301"),
        ("exclude", "301"),
        ("release", "301"),
    ]
