"""Adaptive hang detection on the real local cluster: a checkpoint save that takes far longer
than a step (rank 0 flushing while its peer waits in the barrier, which is what a stall looks
like in the stacks) is not a hang. The stalled-rank and straggler cases run as demo scenarios
(tests/e2e/test_demo.py)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.recovery import completed
from support.service import running_service, service_config
from temporalio.client import Client
from temporalio.service import RPCError

from resurrect.contracts import JobState, recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm, repo_root
from resurrect.temporal.server import EmbeddedTemporal

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.torch]

STEP_S = 0.1  # the job's step time (its sleep; the model's compute is negligible)
SAVE_DELAY_S = 8.0  # 80 steps' time, past the 5 s floor and 3 x the progress interval


@pytest.fixture
def cluster(local_slurm: LocalSlurm) -> Iterator[LocalSlurm]:
    local_slurm.reset()
    yield local_slurm
    local_slurm.reset()


async def test_a_save_far_longer_than_a_step_raises_no_false_hang(
    cluster: LocalSlurm,
    temporal_server: EmbeddedTemporal,
    temporal_client: Client,
    tmp_path: Path,
) -> None:
    root = repo_root()
    ckpt = cluster.out_dir / f"ckpt-slow-save-{int(time.time() * 1000)}"
    ckpt.mkdir(parents=True)
    shutil.chown(ckpt, user=cluster.demo_user)
    config = service_config(
        tmp_path, cluster.cluster_name, cluster.slurm_conf, temporal_server.address
    )
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler):
        job_id = cluster.submit(
            (root / "examples" / "train" / "train.sbatch").read_text(),
            comment=json.dumps({"resurrect": {"checkpoint_dir": str(ckpt)}}),
            nodes=2,
            name="slow-save",
            extra_args=[
                f"--export=ALL,RESURRECT_PYTHON={sys.executable},"
                f"RESURRECT_TRAIN_DIR={root / 'examples' / 'train'},CKPT_DIR={ckpt},"
                f"RESURRECT_TRAIN_STEPS=60,RESURRECT_TRAIN_CKPT_EVERY=20,"
                f"RESURRECT_TRAIN_SLEEP={STEP_S},RESURRECT_TRAIN_SAVE_DELAY_S={SAVE_DELAY_S}"
            ],
        )
        job = await completed(scheduler, job_id, 240)
        assert job.state is JobState.COMPLETED, job
        assert job.restart_count == 0
        workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, 0)
        with pytest.raises(RPCError):
            await temporal_client.get_workflow_handle(workflow_id).describe()
    assert sorted(p.name for p in ckpt.glob("step_*")) == ["step_20", "step_40", "step_60"]
