"""A restart whose launch fails, on a real Slurm (22.05 here): the node's Prolog fails, so
slurmctld drains the node ("Prolog error") and requeues the job and holds it ("launch
failed requeued held") without it ever running. The watcher, which keeps a requeued job in
its view, reports that attempt as an interruption; the recovery's requeue (excluding the node
and giving back an earlier exclusion) releases Slurm's hold, and the job runs elsewhere."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from support.reports import Reports
from support.slurm import DEPLOY_DIR, LocalSlurm, local_slurm_fixture

from resurrect.config import ResurrectConfig
from resurrect.contracts import FaultClass, Interruption
from resurrect.sensors.slurm_watcher import SlurmWatcher

pytestmark = pytest.mark.slurm

OPT_IN = json.dumps({"resurrect": {}})

prolog_slurm = local_slurm_fixture(
    nodes=2,
    scope="module",
    name="prolog_slurm",
    prolog=str(DEPLOY_DIR / "prolog-fail-marked.sh"),
)


async def poll_until(
    watcher: SlurmWatcher, reports: Reports, count: int, timeout: float = 60.0
) -> list[Interruption]:
    deadline = time.monotonic() + timeout
    while len(reports) < count and time.monotonic() < deadline:
        await watcher.poll_once()
        await asyncio.sleep(0.5)
    return list(reports)


async def test_a_restart_slurm_held_after_its_failed_launch_is_reported_and_released(
    prolog_slurm: LocalSlurm,
) -> None:
    slurm = prolog_slurm
    slurm.reset()
    job_id = slurm.submit(["sleep", "600"], nodes=1, comment=OPT_IN, exclude=["node2"])
    await asyncio.to_thread(slurm.wait_job_state, job_id, ["RUNNING"], 60)
    sched = slurm.scheduler()
    reports = Reports()
    config = ResurrectConfig.model_validate({"cluster": {"name": slurm.cluster_name}})
    watcher = SlurmWatcher(sched, config, reports)
    await watcher.poll_once()
    assert reports == []

    marker = slurm.state_dir / "prolog-fail" / "node1"
    marker.parent.mkdir(exist_ok=True)
    marker.touch()
    slurm.run(["scontrol", "requeue", job_id])  # relaunched on node1, where the prolog fails
    requeued, failed = await poll_until(watcher, reports, 2)
    assert (requeued.restart_count, failed.restart_count) == (0, 1)
    assert "launch failed requeued held" in failed.reason, failed.reason
    held = await sched.get_job(job_id)
    assert held.held_after_failed_launch
    assert await sched.list_held_after_failed_launch() == [job_id]
    assert "Prolog error" in slurm.node("node1")["Reason"]
    if failed.suspect_nodes:  # seen while its launch was torn down
        assert failed.suspect_nodes == ["node1"] and failed.fault_hint is FaultClass.NODE_LOST

    marker.unlink()
    result = await sched.requeue_excluding(job_id, ["node1"], drop=["node2"])
    assert result.changed, result.detail
    record = await asyncio.to_thread(slurm.wait_job_state, job_id, ["RUNNING"], 60)
    assert record["NodeList"] == "node2"


async def test_a_new_job_whose_first_launch_fails_is_found_by_the_scan_of_the_queue(
    prolog_slurm: LocalSlurm,
) -> None:
    slurm = prolog_slurm
    slurm.reset()
    marker = slurm.state_dir / "prolog-fail" / "node2"
    marker.parent.mkdir(exist_ok=True)
    marker.touch()
    try:
        job_id = slurm.submit(["sleep", "600"], nodes=1, comment=OPT_IN, exclude=["node1"])
        sched = slurm.scheduler()
        deadline = time.monotonic() + 60
        while not (await sched.get_job(job_id)).held_after_failed_launch:
            assert time.monotonic() < deadline, slurm.job(job_id)
            await asyncio.sleep(0.5)
    finally:
        marker.unlink()
    reports = Reports()
    config = ResurrectConfig.model_validate(
        {"cluster": {"name": slurm.cluster_name}, "watcher": {"held_scan_interval_s": 0.5}}
    )
    watcher = SlurmWatcher(sched, config, reports)
    [failed] = await poll_until(watcher, reports, 1)
    assert (failed.job_id, failed.restart_count) == (job_id, 0)
    assert "launch failed requeued held" in failed.reason
