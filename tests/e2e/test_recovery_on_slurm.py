"""The recovery loop end to end on the real local Slurm cluster and the real Temporal server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.recovery import (
    OPT_IN,
    completed,
    eventually,
    lose_a_node,
    outcome_of,
    started,
    submit_running,
)
from support.service import ServiceConfigFor, running_service
from temporalio.client import Client
from temporalio.service import RPCError

from resurrect.contracts import FaultClass, JobState
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm
from resurrect.scheduler.base import DRAIN_REASON_PREFIX
from resurrect.sensors.log_follower import JobLogFollower
from resurrect.service import ServiceParts

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]


async def test_node_loss_drains_that_node_requeues_and_completes(
    cluster: LocalSlurm, cluster_config: ServiceConfigFor, temporal_client: Client
) -> None:
    config = cluster_config()
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler):
        before, victim, workflow_id, t_fault = await lose_a_node(cluster, scheduler)
        description = await started(temporal_client, workflow_id)
        outcome = await outcome_of(temporal_client, workflow_id)
        detect_s = description.start_time.timestamp() - t_fault
        print(f"\nnode loss: detected {detect_s:.1f} s after the kill")

        assert outcome.recovered, outcome.notes
        assert outcome.fault_class is FaultClass.NODE_LOST
        assert outcome.drained_nodes == [victim]
        node = cluster.node(victim)
        assert node["Reason"].startswith(DRAIN_REASON_PREFIX), node
        others = [n for n in cluster.nodes if n != victim]
        for name in others:
            assert not cluster.node(name).get("Reason", "").startswith(DRAIN_REASON_PREFIX)
        after = await completed(scheduler, before.job_id, 120)
        assert (
            after.job_id == before.job_id
            and after.user == before.user
            and after.user_id == before.user_id
        )
        assert after.restart_count >= 1 and victim not in after.nodes
        assert victim in after.excluded_nodes


async def test_three_jobs_failing_at_once_make_three_recoveries(
    cluster: LocalSlurm, cluster_config: ServiceConfigFor, temporal_client: Client
) -> None:
    crash_once = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then
  sleep 3; echo "srun: error: $SLURMD_NODENAME: task 0: Segmentation fault (core dumped)"; exit 139
fi
echo "attempt ${SLURM_RESTART_COUNT} fine"; sleep 1
"""
    config = cluster_config()
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler):
        jobs = [cluster.submit(crash_once, comment=OPT_IN, nodes=1) for _ in range(3)]
        outcomes = await asyncio.gather(
            *[
                outcome_of(temporal_client, recovery_workflow_id(cluster.cluster_name, j, 0))
                for j in jobs
            ]
        )
        for job_id, outcome in zip(jobs, outcomes, strict=True):
            assert outcome.recovered, (job_id, outcome.notes)
            assert outcome.fault_class is FaultClass.PROCESS_CRASH
            assert (await completed(scheduler, job_id, 90)).restart_count == 1
        for job_id in jobs:
            count = await temporal_client.count_workflows(
                f"ResurrectCluster = '{cluster.cluster_name}' AND ResurrectJobId = '{job_id}'"
            )
            assert count.count == 1


async def test_observe_mode_changes_no_node_and_no_job(
    cluster: LocalSlurm, cluster_config: ServiceConfigFor, temporal_client: Client
) -> None:
    config = cluster_config(mode="observe")
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler):
        before, victim, workflow_id, _ = await lose_a_node(cluster, scheduler, 0, requeue=False)
        job_id = before.job_id
        outcome = await outcome_of(temporal_client, workflow_id)
    assert outcome.outcome == "observed" and not outcome.requeued and outcome.drained_nodes == []
    # Slurm itself fails the job once it declares the node down; nobody requeues it
    await eventually(
        lambda: scheduler.get_job(job_id),
        lambda j: j.state not in (JobState.RUNNING, JobState.COMPLETING),
        90,
        "job failed",
    )
    assert any(f"would drain {victim}" in line for line in outcome.would_have)
    assert any(f"would requeue job {job_id}" in line for line in outcome.would_have)
    job = cluster.job(job_id)
    assert job["Restarts"] == "0" and job["JobState"] in {"NODE_FAIL", "FAILED"}
    for name in cluster.nodes:
        assert not cluster.node(name).get("Reason", "").startswith(DRAIN_REASON_PREFIX)


@pytest.mark.parametrize("own_operator_queue", [False, True], ids=["shared", "operator_queue"])
async def test_worker_killed_mid_recovery_finishes_with_one_drain_and_one_requeue(
    cluster: LocalSlurm,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
    tmp_path: Path,
    own_operator_queue: bool,
) -> None:
    # operator_queue (the default): drain and requeue run as local activities, run again from
    # their start by the next worker when this one is killed in the middle of them; shared:
    # the operator queue named as the task queue
    shared = None if own_operator_queue else cluster_config().temporal.task_queue
    config = cluster_config(
        recovery={"wait_running_timeout_s": 120, "activity_timeout_s": 10},
        temporal={"operator_task_queue": shared},
    )
    config_file = tmp_path / "worker.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    env = {**os.environ, "SLURM_CONF": cluster.slurm_conf, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "resurrect.cli", "worker", "-c", str(config_file)]
    log = open(tmp_path / "worker.log", "ab")
    worker = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    scheduler = cluster.scheduler()
    try:
        async with running_service(
            config, temporal_client, scheduler, ServiceParts(worker=False, follow_logs=False)
        ):
            before, victim, workflow_id, _ = await lose_a_node(cluster, scheduler)
            job_id = before.job_id
            handle = temporal_client.get_workflow_handle(workflow_id)
            deadline = time.monotonic() + 120
            phase = ""
            while phase not in {
                "drain_nodes",
                "verify_checkpoint",
                "requeue_job",
                "wait_running",
                "done",
            }:
                assert time.monotonic() < deadline, "recovery never reached draining"
                try:
                    phase = await handle.query("phase")
                except RPCError:
                    await asyncio.sleep(0.05)
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)
            print(f"\nworker SIGKILLed in phase {phase}")
            worker = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
            outcome = await outcome_of(temporal_client, workflow_id, timeout=240)
            assert outcome.recovered, outcome.notes
            assert outcome.drained_nodes == [victim]
            done = await completed(scheduler, job_id, 120)
            assert done.restart_count == 1, "\n".join(outcome.notes)  # requeued exactly once
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log.close()
    ctld_log = (cluster.state_dir / "log" / "slurmctld.log").read_text(errors="replace")
    # every drain request resurrect makes logs its reason once
    drains = [
        line
        for line in ctld_log.splitlines()
        if f"node {victim} reason set to: resurrect:" in line and f"[{workflow_id}]" in line
    ]
    assert len(drains) == 1, drains


async def test_slurmctld_down_during_recovery_is_waited_out(
    cluster: LocalSlurm, cluster_config: ServiceConfigFor, temporal_client: Client
) -> None:
    config = cluster_config()
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler):
        _, victim, workflow_id, _ = await lose_a_node(cluster, scheduler)
        await started(temporal_client, workflow_id, timeout=120)
        cluster.stop_controller()
        await asyncio.sleep(8)
        cluster.start_controller()
        outcome = await outcome_of(temporal_client, workflow_id, timeout=240)
        assert outcome.recovered, outcome.notes
        assert outcome.drained_nodes == [victim]


async def test_fatal_gpu_line_is_detected_within_a_second_and_restarted_without_a_drain(
    cluster: LocalSlurm, cluster_config: ServiceConfigFor, temporal_client: Client
) -> None:
    """One rank prints a fatal GPU error naming its host while the others block.

    Only the job's own output says so (no node agent runs here, Slurm sees the node up):
    the job is restarted at once, without draining the node, and the restart is charged to
    its budget (tests/e2e/test_node_agent_on_slurm.py drains on the agent's word).
    """
    gpu_fault = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then echo "attempt ${SLURM_RESTART_COUNT} fine"; sleep 2; exit 0; fi
srun bash -c '
if [ "$SLURM_NODEID" = 1 ]; then
  sleep 4
  printf "%s:%s:%s [0] NCCL WARN Cuda failure '"'"'uncorrectable ECC error encountered'"'"' t=%s\\n" "$SLURMD_NODENAME" $$ $$ "$(date +%s.%N)"
fi
sleep 600   # every rank now blocks, as in a collective'
"""
    config = cluster_config()
    scheduler = cluster.scheduler()
    from resurrect.rules import load_engine

    reports: list[float] = []
    async with running_service(config, temporal_client, scheduler, ServiceParts(follow_logs=False)):
        from resurrect.sensors.report import report_interruption

        async def report(interruption):  # type: ignore[no-untyped-def]
            reports.append(time.time())
            return await report_interruption(
                temporal_client, interruption, task_queue=config.temporal.task_queue
            )

        follower = JobLogFollower(scheduler, config, load_engine(), report)
        stop = asyncio.Event()
        follow = asyncio.create_task(follower.run(stop))
        try:
            running = await submit_running(
                cluster, scheduler, gpu_fault, extra_args=["--open-mode=append"]
            )
            job_id, victim = running.job_id, running.nodes[1]
            outcome = await outcome_of(
                temporal_client, recovery_workflow_id(cluster.cluster_name, job_id, 0)
            )
        finally:
            stop.set()
            await follow
    out = Path(running.stdout_path or "")
    line = next(x for x in out.read_text().splitlines() if "uncorrectable ECC" in x)
    written = float(line.rsplit("t=", 1)[1])
    latency = reports[0] - written
    print(f"\nGPU error line detected {latency * 1000:.0f} ms after it was written")
    assert latency < 1.0
    assert outcome.recovered, outcome.notes
    assert outcome.fault_class is FaultClass.GPU_HARDWARE
    assert outcome.drained_nodes == [], outcome.notes
    assert any("only the job's output names it" in note for note in outcome.notes)
    assert any("rests on the job's own output alone" in note for note in outcome.notes)
    assert not cluster.node(victim).get("Reason", "").startswith(DRAIN_REASON_PREFIX)
    done = await completed(scheduler, job_id, 90)
    assert done.restart_count == 1
