"""Operator control end to end on the real local Slurm cluster and the real Temporal server:
the drain budget under a burst of node faults (checked from Slurm's own node states),
an approval given from the CLI, return to service of drained nodes, and the fail-open
watchdog releasing a job whose holder died between hold and release."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.operator_control import operator_keys
from support.recovery import LONG_THEN_SHORT, OPT_IN, completed, eventually, outcome_of
from support.service import ServiceConfigFor, running_service
from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobState
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm
from resurrect.operator.repair_client import node_state
from resurrect.scheduler.base import DRAIN_REASON_PREFIX
from resurrect.scheduler.hold_marker import has_marker

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

REPO = Path(__file__).resolve().parents[2]
CRASH_ONCE = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then
  sleep 2; echo "srun: error: $SLURMD_NODENAME: task 0: Segmentation fault (core dumped)"; exit 139
fi
echo "attempt ${SLURM_RESTART_COUNT} fine"; sleep 1
"""


def config_for(cluster_config: ServiceConfigFor, **overrides: Any) -> ResurrectConfig:
    """The service's configuration for these tests: node repair off unless a test turns it
    on (``overrides`` merged in per section)."""
    overrides.setdefault("repair", {"enabled": False})
    return cluster_config(**overrides)


async def cli(
    config: ResurrectConfig, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``resurrect ARGS -c CONFIG`` as a separate process, as an operator would run it (in
    a thread: the service in this test's event loop must go on answering)."""
    config_file = tmp_path / "cli.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    command, *rest = args
    argv = [sys.executable, "-m", "resurrect.cli", command, "-c", str(config_file), *rest]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return await asyncio.to_thread(
        subprocess.run, argv, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def resurrect_drained(cluster: LocalSlurm) -> list[str]:
    """Nodes Slurm shows drained with resurrect's reason."""
    out = cluster.run(["sinfo", "-h", "-N", "-o", "%N|%E|%T"])
    drained = set()
    for line in out.splitlines():
        name, reason, state = [*line.split("|"), "", ""][:3]
        if reason.startswith(DRAIN_REASON_PREFIX) and "drain" in state:
            drained.add(name)
    return sorted(drained)


@asynccontextmanager
async def drain_watch(cluster: LocalSlurm) -> AsyncIterator[list[int]]:
    """Sample Slurm's node states all along; yields the list of counts seen."""
    seen: list[int] = []

    async def sample() -> None:
        while True:
            seen.append(len(await asyncio.to_thread(resurrect_drained, cluster)))
            await asyncio.sleep(0.3)

    task = asyncio.create_task(sample())
    try:
        yield seen
    finally:
        task.cancel()


async def one_node_jobs_started(
    cluster: LocalSlurm, script: str, count: int, *, requeue: bool = True
) -> list[Any]:
    """Submit ``count`` opted-in one-node jobs; each one's record once it has started on its
    node (running, or already ended: a job that crashes at once may be over before a read)."""
    scheduler = cluster.scheduler()
    ids = [cluster.submit(script, comment=OPT_IN, nodes=1, requeue=requeue) for _ in range(count)]
    return [
        await eventually(
            lambda j=j: scheduler.get_job(j),
            lambda x: (
                x.start_time is not None and x.state is not JobState.PENDING and len(x.nodes) == 1
            ),
            60,
            f"job {j} started",
        )
        for j in ids
    ]


async def test_a_burst_of_node_faults_never_drains_above_the_cap_and_jobs_restart(
    cluster: LocalSlurm,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
    tmp_path: Path,
) -> None:
    """Three jobs lose their node at once; the budget is one drain per hour."""
    config = config_for(
        cluster_config,
        isolation={"max_drain_nodes": 1, "max_drain_fraction": 1.0, "min_drain_budget": 0},
        # report a node as soon as it stops responding, before slurmctld declares it DOWN
        # and requeues its job itself (the recovery would then name no node to drain)
        watcher={"poll_interval_s": 1.0, "log_poll_interval_s": 0.1, "not_responding_grace_s": 0},
    )
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler), drain_watch(cluster) as seen:
        jobs = await one_node_jobs_started(cluster, LONG_THEN_SHORT, 3)
        victims = [j.nodes[0] for j in jobs]
        assert len(set(victims)) == 3
        t_fault = time.monotonic()
        for victim in victims:
            cluster.kill_node(victim)
        outcomes = await asyncio.gather(
            *[
                outcome_of(temporal_client, recovery_workflow_id(cluster.cluster_name, j.job_id, 0))
                for j in jobs
            ]
        )
        t_recovered = time.monotonic()
        print(f"\nrecoveries ended {t_recovered - t_fault:.1f} s after the faults")
        done = [await completed(scheduler, j.job_id, 90) for j in jobs]
        print(f"\nrecoveries done; jobs completed {time.monotonic() - t_recovered:.1f} s later")
        shown = await cli(config, tmp_path, "budget", "--json")
        assert shown.returncode == 0, shown.stderr
        budget = json.loads(shown.stdout)
    drained = [n for o in outcomes for n in o.drained_nodes]
    print(f"\nburst: drained {drained}, most drained at once (sinfo) {max(seen)}")
    assert len(drained) == 1 and max(seen) == 1 and resurrect_drained(cluster) == drained
    for outcome, job, victim in zip(outcomes, done, victims, strict=True):
        assert outcome.recovered, outcome.notes
        assert job.restart_count >= 1 and victim not in job.nodes
    # the others were refused by the budget (or slurmctld had requeued the job before the
    # recovery read it, so it named no node of its own to drain)
    refused = [o for o in outcomes if any("drain budget reached" in n for n in o.notes)]
    assert refused, [o.notes for o in outcomes]
    cluster_budget = budget["scopes"][0]
    assert (cluster_budget["used"], cluster_budget["limit"]) == (1, 1) and budget["trips"] == 1
    assert [u["node"] for u in cluster_budget["uses"]] == drained


async def test_an_approval_gated_plan_waits_is_approved_from_the_cli_and_completes(
    cluster: LocalSlurm,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
    tmp_path: Path,
) -> None:
    plans = tmp_path / "gated.yaml"
    plans.write_text(
        textwrap.dedent(
            """
            version: 1
            plans:
              - name: gated-restart
                when: {actions: [restart]}
                approval: {timeout_s: 300, on_timeout: deny}
                steps:
                  - use: restart-from-checkpoint
            """
        )
    )
    keys_dir, keys = operator_keys(tmp_path, "ops-alice")  # the worker's and alice's copy
    config = config_for(
        cluster_config,
        plans={"paths": [str(plans)]},
        approvals={
            "operator_keys_dir": str(keys_dir),
            "operator_key_file": str(keys["ops-alice"]),
        },
    )
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler):
        (job,) = await one_node_jobs_started(cluster, CRASH_ONCE, 1)
        workflow_id = recovery_workflow_id(cluster.cluster_name, job.job_id, 0)

        async def waiting() -> Any:
            try:
                phase = await temporal_client.get_workflow_handle(workflow_id).query("phase")
            except Exception:
                phase = None
            return job if phase == "awaiting_approval" else None

        await eventually(waiting, bool, 60, "the recovery awaiting approval")
        await asyncio.sleep(1.0)
        assert (await scheduler.get_job(job.job_id)).restart_count == 0  # not requeued yet
        answer = await cli(config, tmp_path, "approve", workflow_id, "--reason", "owner agreed")
        assert answer.returncode == 0, answer.stderr
        outcome = await outcome_of(temporal_client, workflow_id)
        finished = await completed(scheduler, job.job_id, 60)
    assert outcome.recovered, outcome.notes
    assert finished.restart_count == 1
    assert any("approved by ops-alice: owner agreed" in n for n in outcome.notes)


async def test_a_healthy_drained_node_returns_and_takes_jobs_an_unhealthy_one_stays_drained(
    cluster: LocalSlurm,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
    tmp_path: Path,
) -> None:
    config = config_for(
        cluster_config,
        isolation={"max_drain_fraction": 0.5, "health_check_argv": cluster.health_check_argv},
        repair={"enabled": True, "cool_down_s": 6, "recheck_interval_s": 600, "max_checks": 2},
    )
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler):
        # --no-requeue: slurmctld cannot requeue them first (the recovery then sees a pending
        # job and no node of its own to drain); this test is about the nodes
        jobs = await one_node_jobs_started(cluster, LONG_THEN_SHORT, 2, requeue=False)
        healthy, broken = (j.nodes[0] for j in jobs)
        cluster.kill_node(healthy)
        cluster.kill_node(broken)
        await eventually(
            lambda: asyncio.to_thread(resurrect_drained, cluster),  # type: ignore[arg-type,return-value]
            lambda drained: healthy in drained,  # type: ignore[arg-type,operator]
            60,
            f"{healthy} drained by resurrect",
        )
        cluster.start_node(healthy)  # it comes back; `broken` stays dead

        async def returned() -> Any:
            state = await node_state(temporal_client, cluster.cluster_name, healthy)
            return state if state is not None and state.returns == 1 else None

        await eventually(returned, bool, 60, f"{healthy} back in service")
        again = cluster.submit(["sleep", "1"], nodes=1, extra_args=[f"--nodelist={healthy}"])
        ran = await completed(scheduler, again, 60)

        async def failed_check() -> Any:
            state = await node_state(temporal_client, cluster.cluster_name, broken)
            return state if state is not None and state.status == "drained_unhealthy" else None

        broken_state = await eventually(failed_check, bool, 60, f"{broken} check failed")
        shown = await cli(config, tmp_path, "nodes", broken, "--history")
    assert ran.nodes == [healthy]
    assert cluster.node(healthy)["State"] in {"IDLE", "ALLOCATED", "MIXED"}
    node = cluster.node(broken)
    assert "DRAIN" in node["State"] and node["Reason"].startswith(DRAIN_REASON_PREFIX), node
    (failure,) = [e for e in broken_state.events if e.kind == "check_failed"]
    # its slurmd stays dead: Slurm does not hear it, so no health check is even run
    assert "does not hear its slurmd" in failure.detail and broken_state.returns == 0
    assert shown.returncode == 0 and "check_failed" in shown.stdout, shown.stderr


HOLD_THEN_DIE = """
import asyncio, sys
from pathlib import Path
from resurrect.scheduler.hold_marker import HoldMarkKey
from resurrect.scheduler.slurm_cli import SlurmCli

async def main() -> None:
    scheduler = SlurmCli(sys.argv[1], sys.argv[2], verify_timeout=30)
    scheduler.hold_mark_key = HoldMarkKey(Path(sys.argv[4]))  # the watchdog's key file
    job = await scheduler.get_job(sys.argv[3])
    steps = await scheduler._hold_for_requeue(job)  # resurrect's own hold, as a requeue does
    print("HELD", steps, flush=True)
    await asyncio.sleep(3600)  # killed here: the release never comes

asyncio.run(main())
"""


async def test_a_job_held_by_a_resurrect_that_died_is_released_by_the_watchdog(
    cluster: LocalSlurm,
    cluster_config: ServiceConfigFor,
    tmp_path: Path,
) -> None:
    config = config_for(cluster_config)
    scheduler = cluster.scheduler()
    (job,) = await one_node_jobs_started(cluster, LONG_THEN_SHORT, 1)
    admin = cluster.submit(["sleep", "1"], nodes=1, extra_args=["--hold"])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen(
        [
            *(sys.executable, "-c", HOLD_THEN_DIE, cluster.cluster_name, cluster.slurm_conf),
            *(job.job_id, str(config.hold_mark_key_file)),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(holder.stdout.readline), 60)
        assert line.startswith("HELD"), line
    finally:
        holder.send_signal(signal.SIGKILL)  # every resurrect process is gone, and stays so
        holder.wait(timeout=10)
    t_held = time.monotonic()
    held = await eventually(  # its old run may show COMPLETING for a moment
        lambda: scheduler.get_job(job.job_id),
        lambda j: j.state is JobState.PENDING,
        30,
        "the held job pending",
    )
    assert held.held and has_marker(await scheduler.read_admin_comment(job.job_id)), held
    # a bound the hold cannot have outlived, however slow the machine: left alone
    early = await cli(config, tmp_path, "watchdog", "--once", "--bound-s", "3600")
    assert early.returncode == 0 and early.stdout == "", early.stderr
    assert (await scheduler.get_job(job.job_id)).held
    await asyncio.sleep(max(0.0, 3 - (time.monotonic() - t_held)))  # the mark is now older than 2 s
    late = await cli(config, tmp_path, "watchdog", "--once", "--bound-s", "2")
    assert late.returncode == 0 and f"job {job.job_id}: released" in late.stdout, late.stderr
    again = await eventually(
        lambda: scheduler.get_job(job.job_id),
        lambda j: j.state in (JobState.RUNNING, JobState.COMPLETED),
        60,
        "the released job running again",
    )
    assert again.restart_count == 1
    assert not has_marker(await scheduler.read_admin_comment(job.job_id))
    assert (await scheduler.get_job(admin)).held  # an administrator's hold is never touched
