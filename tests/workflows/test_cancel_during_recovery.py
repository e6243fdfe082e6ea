"""Attack 14: a job cancelled by a person during its recovery was requeued anyway.

Slurm itself requeues a CANCELLED batch job when asked (``scontrol requeue``), so a
recovery that read the job before its owner (or an administrator) ran ``scancel`` and
requeued it afterwards brought back a job somebody had deliberately stopped. The requeue
step now reads the job again right before acting, and once more while resurrect holds it
pending (an ``scancel`` of a held job makes it CANCELLED), and leaves it cancelled.

Real Slurm (deploy/local-slurm) and the real Temporal dev server.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import pytest
from support.builders import interruption
from support.recovery import OPT_IN, eventually, outcome_of
from support.workers import resurrect_workers
from temporalio.client import Client

from resurrect.activities.steps import requeue_job
from resurrect.config import ResurrectConfig
from resurrect.contracts import FaultClass, JobState
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.contracts.workflow_names import PHASE_QUERY
from resurrect.scheduler.slurm_cli import SlurmCli
from resurrect.sensors.report import report_interruption
from resurrect.testing import FakeScheduler
from resurrect.testing.steps import make_step_input, run_step

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

LONG_JOB = "#!/bin/bash\nsrun sleep 300\n"
# A plan whose restart waits at a gate before requeueing: the window in which a person
# cancels the job (in production: a long checkpoint verification).
GATE = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.1)\n"


def gated_plan(path: Path, marker: Path) -> Path:
    plan = {
        "version": 1,
        "plans": [
            {
                "name": "restart-from-checkpoint",
                "when": {"actions": ["restart"]},
                "steps": [
                    {
                        "activity": "recovery.run_program",
                        "params": {"argv": [sys.executable, "-c", GATE, str(marker)]},
                        "timeout_s": 120,
                    },
                    {"activity": "recovery.requeue_job", "timeout_s": 90},
                    {
                        "activity": "recovery.wait_running",
                        "timeout_s": 30,
                        "on_failure": "continue",
                    },
                ],
            }
        ],
    }
    path.write_text(json.dumps(plan))
    return path


def as_owner(cluster, *argv: str) -> list[str]:  # type: ignore[no-untyped-def]
    """argv that runs a Slurm command as the job's owner (the demo user)."""
    return [
        "runuser",
        "-u",
        cluster.demo_user,
        "--",
        "env",
        f"SLURM_CONF={cluster.slurm_conf}",
        *argv,
    ]


@pytest.fixture
def cluster(local_slurm):  # type: ignore[no-untyped-def]
    local_slurm.reset()
    yield local_slurm
    local_slurm.reset()


async def test_slurm_itself_requeues_a_cancelled_job(cluster) -> None:  # type: ignore[no-untyped-def]
    """Why the check matters: nothing in Slurm stops an operator's requeue of it."""
    job_id = cluster.submit(LONG_JOB, comment=OPT_IN, nodes=1)
    cluster.wait_job_state(job_id, ["RUNNING"])
    cluster.run(["scancel", job_id])
    cluster.wait_job_state(job_id, ["CANCELLED"])
    cluster.run(["scontrol", "requeuehold", job_id])
    record = cluster.wait_job_state(job_id, ["PENDING"])
    assert record["JobState"] == "PENDING"  # the cancelled job is back
    cluster.run(["scancel", job_id])


async def test_scancel_during_a_recovery_is_final(
    cluster,
    temporal_client: Client,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    marker = tmp_path / "release-gate"
    config = ResurrectConfig.model_validate(
        {
            "mode": "act",
            "cluster": {
                "name": cluster.cluster_name,
                "slurm_conf": cluster.slurm_conf,
                "scheduler": "cli",
            },
            "temporal": {
                "embedded": False,
                "task_queue": f"cancel-{uuid.uuid4().hex[:8]}",
                "state_dir": str(tmp_path / "state"),
            },
            "plans": {"paths": [str(gated_plan(tmp_path / "plans.yaml", marker))]},
            "recovery": {"wait_running_timeout_s": 20, "activity_timeout_s": 30},
        }
    )
    scheduler = cluster.scheduler()
    job_id = cluster.submit(LONG_JOB, comment=OPT_IN, nodes=1)
    running = await eventually(
        lambda: scheduler.get_job(job_id),
        lambda j: j.state is JobState.RUNNING,
        60,
        f"job {job_id} running",
    )
    report = interruption(
        cluster.cluster_name,
        running,
        source="log_tail",
        reason="no output and no checkpoint activity for 901 s",
        fault_hint=FaultClass.JOB_HANG,
    )
    async with resurrect_workers(temporal_client, config, scheduler):
        workflow_id = await report_interruption(
            temporal_client, report, task_queue=config.temporal.task_queue
        )
        assert workflow_id == recovery_workflow_id(cluster.cluster_name, job_id, 0)
        handle = temporal_client.get_workflow_handle(workflow_id)
        for _ in range(300):
            if await handle.query(PHASE_QUERY) == "run_program":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the recovery never reached its gate")
        # the owner cancels the job while the recovery is under way
        cluster.run(as_owner(cluster, "scancel", job_id))
        cluster.wait_job_state(job_id, ["CANCELLED"])
        marker.touch()
        outcome = await outcome_of(temporal_client, workflow_id, timeout=120)

    assert outcome.outcome == "cancelled_during_recovery", outcome.notes
    assert not outcome.requeued and not outcome.recovered
    assert any("never requeued" in note for note in outcome.notes), outcome.notes
    # the recovery has ended and each scontrol it ran returned once slurmctld had applied
    # it: the record read now is what resurrect left
    record = cluster.job(job_id)
    assert record["JobState"] == "CANCELLED", record
    assert record.get("Restarts") == "0", record


class CancelledWhileHeld(SlurmCli):
    """The owner's ``scancel`` lands while resurrect holds the job pending."""

    def __init__(self, *args: object, cancel_argv: list[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.cancel_argv = cancel_argv
        self.release_attempted = False

    async def _act_exclude(self, job_id: str, nodes: list[str]) -> None:
        proc = await asyncio.create_subprocess_exec(*self.cancel_argv)
        await proc.wait()
        for _ in range(100):
            if (await self.get_job(job_id)).state is JobState.CANCELLED:
                break
            await asyncio.sleep(0.1)
        await super()._act_exclude(job_id, nodes)

    async def _act_release(self, job_id: str) -> None:
        self.release_attempted = True
        await super()._act_release(job_id)


async def test_scancel_of_the_held_job_leaves_it_cancelled(cluster) -> None:  # type: ignore[no-untyped-def]
    job_id = cluster.submit(LONG_JOB, comment=OPT_IN, nodes=2)
    cluster.wait_job_state(job_id, ["RUNNING"])
    scheduler = CancelledWhileHeld(
        cluster.cluster_name,
        cluster.slurm_conf,
        verify_timeout=30.0,
        cancel_argv=as_owner(cluster, "scancel", job_id),
    )
    job = await scheduler.get_job(job_id)
    victim = job.nodes[-1]
    step_input = make_step_input(
        "recovery.requeue_job", job=job, culprits=[victim], fault_class=FaultClass.NODE_LOST
    )
    result = await run_step(requeue_job, scheduler=scheduler, step_input=step_input)
    assert result.outcome == "cancelled_during_recovery" and result.stop_recovery
    assert not result.requeued
    assert not scheduler.release_attempted, "a cancelled job must never be released"
    assert cluster.job(job_id)["JobState"] == "CANCELLED"  # the step's scontrols returned


async def test_the_step_refuses_a_cancelled_job_even_where_the_scheduler_would_requeue() -> None:
    """The fake scheduler requeues a cancelled job as Slurm does; the step must not ask."""
    scheduler = FakeScheduler.with_nodes(4, cluster_name="test")
    step_input = make_step_input("recovery.requeue_job")
    scheduler.jobs["42"] = step_input.bundle.job.model_copy(update={"state": JobState.CANCELLED})
    result = await run_step(requeue_job, scheduler=scheduler, step_input=step_input)
    assert result.outcome == "cancelled_during_recovery" and not result.requeued
    assert scheduler.calls == []
