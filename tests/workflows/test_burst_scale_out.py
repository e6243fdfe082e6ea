"""Scale-out: three worker processes and three sensor processes on one task queue, one real
Temporal dev server, one shared in-memory cluster; one worker and one sensor are killed
(SIGKILL) in the middle of a burst of node losses. Every job is still requeued exactly
once, no node is drained twice, every recovery finishes recovered."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.builders import make_config
from support.burst_processes import next_line, spawn, spawn_worker
from support.node_loss import SOURCES, lost_node_cluster, node_loss_reports
from support.shared_scheduler import serving
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from resurrect.contracts import JobState, RecoveryOutcome
from resurrect.contracts.workflow_ids import recovery_workflow_id

pytestmark = pytest.mark.temporal

JOBS = 30


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


@pytest.mark.parametrize("own_operator_queue", [False, True], ids=["shared", "operator_queue"])
async def test_killing_a_worker_and_a_sensor_mid_burst_recovers_each_job_once(
    temporal_client: Client, temporal_server: Any, tmp_path: Path, own_operator_queue: bool
) -> None:
    # operator_queue: the budget and repair workflows on their own task queue, drain and
    # requeue as local activities (run again from their start on another worker)
    queue = f"q-{uuid.uuid4().hex}"
    config = make_config(
        tmp_path,
        mode="act",
        temporal={
            "task_queue": queue,
            # shared: the operator queue named as the task queue; else the default, its own
            "operator_task_queue": None if own_operator_queue else queue,
        },
        isolation={"max_drain_fraction": 1.0},
        recovery={"wait_running_timeout_s": 60, "activity_timeout_s": 10},
    )
    scheduler = lost_node_cluster(JOBS, config.cluster.name)
    lost = {job.nodes[1] for job in scheduler.jobs.values()}
    socket = tmp_path / "scheduler.sock"
    config_path = tmp_path / "config.json"
    config_path.write_text(config.model_dump_json())
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
                reports.write_text(
                    "".join(
                        r.model_dump_json() + "\n" for r in node_loss_reports(scheduler, source)
                    )
                )
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
                    recovery_workflow_id(config.cluster.name, job_id, 0),
                    result_type=RecoveryOutcome,
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
    assert set(drains) == lost
    assert set(drains.values()) == {1}, drains
    for job in scheduler.jobs.values():
        assert job.state is JobState.RUNNING and job.restart_count == 1
        assert not set(job.nodes) & lost


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
