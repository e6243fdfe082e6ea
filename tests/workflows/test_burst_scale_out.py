"""Scale-out: three worker processes and three sensor processes on one task queue, one real
Temporal dev server, one shared in-memory cluster; one worker and one sensor are killed
(SIGKILL) in the middle of a burst of node losses. Every job is still requeued exactly
once, no node is drained twice, every recovery finishes recovered."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.builders import make_config, opt_in
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from resurrect.contracts import (
    Evidence,
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    NodeInfo,
    RecoveryOutcome,
    SignalKind,
)
from resurrect.testing import FakeScheduler
from resurrect.testing.burst_processes import next_line, spawn, spawn_worker
from resurrect.testing.shared_scheduler import serving

pytestmark = pytest.mark.temporal

JOBS = 30
SOURCES = ("slurm_watcher", "node_agent", "log_tail")


def lost_node_cluster(name: str) -> FakeScheduler:
    """JOBS running 2-node jobs; the second node of each is down; as many spare nodes."""
    scheduler = FakeScheduler(cluster_name=name)
    for index in range(JOBS):
        up, down = f"a{index:03d}", f"b{index:03d}"
        scheduler.nodes[up] = NodeInfo(name=up, state="ALLOCATED")
        scheduler.nodes[down] = NodeInfo(name=down, state="DOWN", flags=["NOT_RESPONDING"])
        scheduler.nodes[f"s{index:03d}"] = NodeInfo(name=f"s{index:03d}", state="IDLE")
        job_id = str(5000 + index)
        scheduler.jobs[job_id] = JobInfo(
            job_id=job_id,
            name="train",
            state=JobState.RUNNING,
            user="alice",
            nodes=[up, down],
            num_nodes=2,
            comment=opt_in(max_restarts=3),
        )
    return scheduler


def sensor_reports(cluster: str, scheduler: FakeScheduler, source: str) -> str:
    """What one sensor reports, one JSON line per job (the node agent with its evidence)."""
    lines = []
    for job in scheduler.jobs.values():
        lost = job.nodes[1]
        evidence = (
            [
                Evidence(
                    kind=SignalKind.HEARTBEAT,
                    text=f"node agent on {lost} silent for 6.0s",
                    role="root",
                    fault_class=FaultClass.NODE_LOST,
                    host=lost,
                )
            ]
            if source == "node_agent"
            else []
        )
        report = Interruption(
            cluster=cluster,
            job_id=job.job_id,
            restart_count=0,
            source=source,
            reason=f"node {lost} lost",
            observed_at=datetime.now(UTC),
            job_state=JobState.RUNNING,
            nodes=list(job.nodes),
            suspect_nodes=[lost],
            fault_hint=FaultClass.NODE_LOST,
            evidence=evidence,
        )
        lines.append(report.model_dump_json())
    return "\n".join(lines) + "\n"


@contextmanager
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Started processes, each killed at the end (if it is still running)."""
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


async def test_killing_a_worker_and_a_sensor_mid_burst_recovers_each_job_once(
    temporal_client: Client, temporal_server: Any, tmp_path: Path
) -> None:
    config = make_config(
        tmp_path,
        mode="act",
        isolation={"max_drain_fraction": 1.0},
        recovery={"wait_running_timeout_s": 60, "activity_timeout_s": 10},
    )
    scheduler = lost_node_cluster(config.cluster.name)
    socket = tmp_path / "scheduler.sock"
    config_path = tmp_path / "config.json"
    config_path.write_text(config.model_dump_json())
    queue = config.temporal.task_queue
    async with serving(scheduler, socket):
        with processes() as started:
            workers = [
                spawn_worker(
                    temporal_server.address, config_path, socket, tmp_path / f"worker{i}.log"
                )
                for i in range(3)
            ]
            started.extend(workers)
            for worker in workers:
                assert await next_line(worker) == "ready"
            sensors = []
            for source in SOURCES:
                reports = tmp_path / f"{source}.jsonl"
                reports.write_text(sensor_reports(config.cluster.name, scheduler, source))
                sensors.append(
                    spawn(
                        "report",
                        tmp_path / f"{source}.log",
                        "--address",
                        temporal_server.address,
                        "--task-queue",
                        queue,
                        "--reports",
                        str(reports),
                        "--pause-s",
                        "0.05",
                    )
                )
                started.append(sensors[-1])
            # mid-burst: the Slurm watcher has reported some jobs, the workers are busy
            for _ in range(JOBS // 4):
                assert (await next_line(sensors[0])).startswith("reported")
            workers[0].send_signal(signal.SIGKILL)
            sensors[1].send_signal(signal.SIGKILL)  # the node agent's reports stop here
            handles = [
                temporal_client.get_workflow_handle(
                    f"recover/{config.cluster.name}/{job_id}/0", result_type=RecoveryOutcome
                )
                for job_id in scheduler.jobs
            ]
            outcomes: list[RecoveryOutcome] = await asyncio.wait_for(
                asyncio.gather(*[_result_when_started(h) for h in handles]), timeout=90
            )
    assert all(o.recovered for o in outcomes), [o.notes for o in outcomes if not o.recovered]
    requeues = Counter(job for op, job in scheduler.calls if op == "requeuehold")
    assert requeues == Counter({job_id: 1 for job_id in scheduler.jobs})
    drains = Counter(node for op, node in scheduler.calls if op == "drain")
    assert sorted(drains) == sorted(f"b{i:03d}" for i in range(JOBS))
    assert set(drains.values()) == {1}, drains
    for job in scheduler.jobs.values():
        assert job.state is JobState.RUNNING and job.restart_count == 1
        assert job.nodes[1] not in {f"b{i:03d}" for i in range(JOBS)}


async def _result_when_started(handle: Any) -> RecoveryOutcome:
    """The recovery's outcome, waiting first for a sensor to have started it."""
    while True:
        try:
            outcome: RecoveryOutcome = await handle.result()
            return outcome
        except RPCError as exc:
            if exc.status is not RPCStatusCode.NOT_FOUND:
                raise
            await asyncio.sleep(0.2)
