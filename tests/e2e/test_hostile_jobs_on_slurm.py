"""Hostile jobs beside a good one on the real local Slurm cluster: a comment that crashed
policy parsing, an output pattern that crashed job listing, an output path that is a
device or a symlink to one. The service keeps serving: the good job's node is killed and
the good job is still recovered; the hostile ones get notes, not a crashed loop."""

from __future__ import annotations

import json
import logging
import os
import pwd
from pathlib import Path

import pytest
from support.recovery import LONG_THEN_SHORT, OPT_IN, completed, outcome_of, running_on_two_nodes
from support.service import ServiceConfigFor, running_service
from temporalio.client import Client

from resurrect.contracts import FaultClass, JobState
from resurrect.contracts.workflow_ids import recovery_workflow_id

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

# Runs while the good job is checked, then frees its node for the good job's next attempt.
SLEEPER = "#!/bin/bash\necho started; sleep 30\n"


async def test_good_job_recovered_beside_hostile_jobs(
    cluster,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
    caplog: pytest.LogCaptureFixture,  # type: ignore[no-untyped-def]
) -> None:
    caplog.set_level(logging.INFO)
    config = cluster_config()
    scheduler = cluster.scheduler()
    owner = pwd.getpwnam(cluster.demo_user)
    zero_link = cluster.out_dir / "zero-link.out"
    zero_link.unlink(missing_ok=True)
    zero_link.symlink_to("/dev/zero")
    os.lchown(zero_link, owner.pw_uid, owner.pw_gid)
    async with running_service(config, temporal_client, scheduler):
        # 1. a comment holding a 500-digit integer and an output width of 10**20 digits
        huge = cluster.submit(
            SLEEPER,
            comment='{"resurrect": {"max_restarts": '
            + "9" * 500
            + "}}",  # sbatch refuses comments over ~1 KiB; scontrol or other versions may not
            nodes=1,
            output=str(cluster.out_dir / "%99999999999999999999j.out"),
        )
        # 2. opted in, its stdout a device and its stderr a symlink to /dev/zero
        device = cluster.submit(
            SLEEPER,
            comment=OPT_IN,
            nodes=1,
            output="/dev/null",
            extra_args=[f"--error={zero_link}"],
        )
        good = cluster.submit(LONG_THEN_SHORT, comment=OPT_IN, nodes=2)
        before = await running_on_two_nodes(scheduler, good)
        for job_id in (huge, device):
            job = await scheduler.get_job(job_id)
            assert job.state is JobState.RUNNING, job
        listed = {job.job_id: job for job in await scheduler.list_jobs()}
        assert good in listed and huge in listed  # one odd job never hides the others
        # expanded as slurmstepd did: the width capped at 10 digits, the file is there
        assert listed[huge].stdout_path == str(cluster.out_dir / f"{int(huge):010d}.out")
        assert Path(listed[huge].stdout_path).is_file()

        victim = before.nodes[-1]
        cluster.kill_node(victim)
        outcome = await outcome_of(
            temporal_client, recovery_workflow_id(cluster.cluster_name, good, 0)
        )
        assert outcome.recovered, outcome.notes
        assert outcome.fault_class is FaultClass.NODE_LOST
        assert outcome.drained_nodes == [victim]
        after = await completed(scheduler, good, 120)
        assert after.restart_count >= 1 and victim not in after.nodes

    text = caplog.text
    assert (
        f"job {huge}: malformed resurrect comment, so not opted in: an integer of 500 digits"
        in text
    )
    assert f"job {device}: /dev/null is a character device, not a regular file: not read" in text
    assert f"job {device}: {zero_link} is a symlink, not a regular file: not read" in text
    assert "Traceback" not in text


async def test_hang_is_declared_only_after_checkpoints_went_still(
    cluster,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """The cheap checkpoint look on real files: saves keep a silent job alive; once output
    and checkpoints both stay still past hang_after_s, the job is reported hung, cancelled
    and restarted."""
    config = cluster_config()
    scheduler = cluster.scheduler()
    owner = pwd.getpwnam(cluster.demo_user)
    ckpt = cluster.out_dir / f"ckpt-{tmp_path.name}"
    ckpt.mkdir()
    os.chown(ckpt, owner.pw_uid, owner.pw_gid)
    script = f"""#!/bin/bash
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then echo "attempt again"; sleep 2; exit 0; fi
echo "step 1"
sleep 4; mkdir -p {ckpt}/step_1; echo a > {ckpt}/step_1/model.pt   # silent, but saving
sleep 8; echo b >> {ckpt}/step_1/model.pt
sleep 600
"""
    comment = json.dumps({"resurrect": {"hang_after_s": 30, "checkpoint_dir": str(ckpt)}})
    async with running_service(config, temporal_client, scheduler):
        job_id = cluster.submit(script, comment=comment, nodes=1)
        workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, 0)
        outcome = await outcome_of(temporal_client, workflow_id, timeout=240)
        description = await temporal_client.get_workflow_handle(workflow_id).describe()
        last_save = (ckpt / "step_1" / "model.pt").stat().st_mtime
        declared_after_s = description.start_time.timestamp() - last_save
        print(f"\nhang declared {declared_after_s:.1f} s after the last checkpoint write")
        assert 30 <= declared_after_s < 30 + 15
        assert outcome.fault_class is FaultClass.JOB_HANG, outcome.notes
        assert outcome.recovered, outcome.notes
        after = await completed(scheduler, job_id, 120)
        assert after.restart_count == 1
