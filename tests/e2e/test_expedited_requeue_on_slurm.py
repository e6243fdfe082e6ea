"""Slurm's own expedited requeue (``sbatch --requeue=expedite`` with
``SlurmctldParameters=enable_expedited_requeue``, 25.11+) meets resurrect's recovery.

On 26.05 slurmctld requeues such a job the moment it declares the lost node DOWN and starts
it again at once on other nodes (COMPLETING with the restart counted, then RUNNING within a
fraction of a second; no PENDING/BeginTime phase, ``EXPEDITED_REQUEUE`` in the job's JSON
``flags``, ``ExpeditedRequeue=Yes`` in ``scontrol show job``). resurrect must still drain
the lost node and record one recovery, and must never requeue the job a second time.

Runs only when the tests run Slurm 25.11 or later (``RESURRECT_SLURM_VERSION=26.05``), on a
cluster of its own with expedited requeue enabled.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.recovery import LONG_THEN_SHORT, OPT_IN, completed, outcome_of, running_on_two_nodes
from support.service import running_service, service_config
from support.slurm import requested_slurm_version
from temporalio.client import Client

from resurrect.contracts import FaultClass
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm, start_local_slurm, stop_local_slurm
from resurrect.scheduler.base import DRAIN_REASON_PREFIX
from resurrect.temporal.server import EmbeddedTemporal

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slurm_versions]


def _has_expedited_requeue(version: str | None) -> bool:
    if version is None:
        return False
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) >= (25, 11)


@pytest.fixture(scope="module")
def expedite_cluster() -> Iterator[LocalSlurm]:
    if not _has_expedited_requeue(requested_slurm_version()):
        pytest.skip("expedited requeue needs Slurm 25.11+ (RESURRECT_SLURM_VERSION=26.05)")
    cluster = start_local_slurm(slurmctld_parameters="enable_expedited_requeue")
    try:
        yield cluster
    finally:
        stop_local_slurm(cluster)


async def test_a_job_slurm_requeued_expedited_is_recovered_once_and_never_requeued_again(
    expedite_cluster: LocalSlurm,
    temporal_server: EmbeddedTemporal,
    temporal_client: Client,
    tmp_path: Path,
) -> None:
    cluster = expedite_cluster
    config = service_config(
        tmp_path, cluster.cluster_name, cluster.slurm_conf, temporal_server.address
    )
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler):
        job_id = cluster.submit(
            LONG_THEN_SHORT,
            comment=OPT_IN,
            nodes=2,
            requeue=None,
            extra_args=["--requeue=expedite"],
        )
        before = await running_on_two_nodes(scheduler, job_id)
        assert "ExpeditedRequeue=Yes" in cluster.run(["scontrol", "show", "job", "-o", job_id])
        victim = before.nodes[-1]
        cluster.kill_node(victim)
        workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, before.restart_count)
        outcome = await outcome_of(temporal_client, workflow_id)
        print(f"\nexpedited requeue: {outcome.outcome} requeued={outcome.requeued} {outcome.notes}")
        assert outcome.fault_class is FaultClass.NODE_LOST
        assert outcome.drained_nodes == [victim]
        assert cluster.node(victim)["Reason"].startswith(DRAIN_REASON_PREFIX)
        after = await completed(scheduler, job_id, 120)
        # Slurm's requeue was the only one: one restart, one recovery
        assert after.restart_count == 1, after
        assert victim not in after.nodes
        count = await temporal_client.count_workflows(
            f"ResurrectCluster = '{cluster.cluster_name}' AND ResurrectJobId = '{job_id}'"
        )
        assert count.count == 1
