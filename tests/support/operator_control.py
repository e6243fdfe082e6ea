"""Helpers of the operator-control tests (drain budget, approvals, repair, exclusions):
a configuration, jobs whose node died, workers, polling."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig

from resurrect.config import ResurrectConfig
from resurrect.contracts import Interruption, JobInfo, JobState, RecoveryOutcome
from resurrect.contracts.workflow_names import PHASE_QUERY
from resurrect.operator.budget_client import reservation_for, reserve_drains, shape_of
from resurrect.operator.models import DrainGrant
from resurrect.scheduler.base import DRAIN_REASON_PREFIX
from resurrect.sensors.report import report_interruption
from resurrect.testing import FakeScheduler
from resurrect.workers.recovery_worker import build_operator_workers, build_worker
from support.builders import interruption

OPT_IN = json.dumps({"resurrect": {"max_restarts": 2}})


class ConfigFor(Protocol):
    """``make_config`` with the test's state directory and server filled in."""

    def __call__(self, **sections: dict[str, Any]) -> ResurrectConfig: ...


def make_config(tmp_path: Path, address: str, **sections: dict[str, Any]) -> ResurrectConfig:
    data: dict[str, Any] = {
        "mode": "act",
        "cluster": {"name": f"t{uuid.uuid4().hex[:8]}"},
        "temporal": {
            "task_queue": f"q-{uuid.uuid4().hex}",
            "state_dir": str(tmp_path),
            "address": address,
            "embedded": False,
        },
        "recovery": {"wait_running_timeout_s": 20, "activity_timeout_s": 20},
        "repair": {"enabled": False},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return ResurrectConfig.model_validate(data)


def operator_keys(folder: Path, *names: str) -> tuple[Path, dict[str, Path]]:
    """A worker's ``approvals.operator_keys_dir`` holding a key for each of ``names``, and
    each operator's own copy (``approvals.operator_key_file``), all mode 0600."""
    keys_dir = folder / "operator-keys"
    keys_dir.mkdir(mode=0o700)
    own: dict[str, Path] = {}
    for name in names:
        key = os.urandom(32).hex().encode()
        for path in (keys_dir / f"{name}.key", folder / f"{name}.key"):
            path.write_bytes(key)
            path.chmod(0o600)
        own[name] = folder / f"{name}.key"
    return keys_dir, own


def lost_node_jobs(scheduler: FakeScheduler, count: int) -> list[JobInfo]:
    """Job i ran on node i alone, and node i died (Slurm: DOWN, NOT_RESPONDING)."""
    jobs = []
    for i in range(1, count + 1):
        name = f"node{i}"
        scheduler.nodes[name] = scheduler.nodes[name].model_copy(
            update={"state": "DOWN", "flags": ["NOT_RESPONDING"]}
        )
        info = JobInfo(
            job_id=str(100 + i),
            name="train",
            state=JobState.NODE_FAIL,
            user="alice",
            user_id=os.getuid(),
            nodes=[name],
            num_nodes=1,
            comment=OPT_IN,
        )
        scheduler.jobs[info.job_id] = info
        jobs.append(info)
    return jobs


def report_of(config: ResurrectConfig, info: JobInfo) -> Interruption:
    return interruption(config.cluster.name, info)


@asynccontextmanager
async def workers(
    client: Client, config: ResurrectConfig, scheduler: FakeScheduler, count: int = 2
) -> AsyncIterator[None]:
    """``count`` worker processes' workers (the recoveries' and, on the operator task queue,
    the budget and repair workflows'), each with its own client and Temporal runtime."""
    async with AsyncExitStack() as stack:
        for index in range(count):
            own = client
            if index:
                own = await Client.connect(
                    config.temporal.address,
                    data_converter=client.data_converter,
                    runtime=Runtime(telemetry=TelemetryConfig()),
                )
            await stack.enter_async_context(build_worker(own, config, scheduler))
            for operator in build_operator_workers(own, config, scheduler):
                await stack.enter_async_context(operator)
        yield


async def reserve(
    client: Client,
    config: ResurrectConfig,
    scheduler: FakeScheduler,
    node: str,
    *,
    workflow_id: str,
    job_id: str,
) -> DrainGrant:
    """Reserve draining ``node`` for the recovery ``workflow_id`` (the drain step's call),
    against the budget of a cluster of ``scheduler``'s nodes."""
    nodes = list(scheduler.nodes.values())
    request = reservation_for(
        config,
        workflow_id=workflow_id,
        job_id=job_id,
        wanted=[node],
        nodes=nodes,
        shape=shape_of(nodes),
    )
    return await reserve_drains(client, config, request, scheduler, observe=False)


async def start(client: Client, config: ResurrectConfig, info: JobInfo) -> str:
    return await report_interruption(
        client, report_of(config, info), task_queue=config.temporal.task_queue
    )


async def result(client: Client, workflow_id: str) -> RecoveryOutcome:
    handle = client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)
    outcome: RecoveryOutcome = await asyncio.wait_for(handle.result(), timeout=90)
    return outcome


async def until(probe: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def drained_by_us(scheduler: FakeScheduler) -> list[str]:
    return sorted(
        n.name
        for n in scheduler.nodes.values()
        if n.drained and n.reason.startswith(DRAIN_REASON_PREFIX)
    )


def notifications(config: ResurrectConfig, kind: str) -> list[dict[str, Any]]:
    path = config.temporal.state_dir / "notifications.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line for line in lines if line.get("kind") == kind]


async def awaiting(client: Client, workflow_id: str) -> None:
    handle = client.get_workflow_handle(workflow_id)

    async def phase() -> bool:
        return bool(await handle.query(PHASE_QUERY, result_type=str) == "awaiting_approval")

    await until(phase, f"{workflow_id} awaiting approval")
