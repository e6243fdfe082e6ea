"""Run resurrect's service (worker, watcher, log follower) inside a test, on real daemons."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from temporalio.client import Client

from resurrect.config import ResurrectConfig, merge_sections
from resurrect.scheduler.base import Scheduler
from resurrect.service import ServiceParts, run_service
from support.builders import make_config


def service_config(
    tmp_path: Path, cluster_name: str, slurm_conf: str, address: str, **overrides: Any
) -> ResurrectConfig:
    """The configuration of a service acting on the real cluster, against a running
    Temporal server; ``overrides`` are merged in per section."""
    sections: dict[str, Any] = {
        "mode": "act",
        "cluster": {"name": cluster_name, "slurm_conf": slurm_conf, "scheduler": "cli"},
        "temporal": {"embedded": False, "address": address},
        "watcher": {"poll_interval_s": 1.0, "log_poll_interval_s": 0.1},
        "recovery": {"wait_running_timeout_s": 120, "activity_timeout_s": 30},
    }
    return make_config(tmp_path / "resurrect-state", **merge_sections(sections, overrides))


class ServiceConfigFor(Protocol):
    """``service_config`` with the cluster, the server and the state directory filled in
    (the end-to-end tests' ``cluster_config`` fixture)."""

    def __call__(self, **overrides: Any) -> ResurrectConfig: ...


@contextlib.asynccontextmanager
async def running_service(
    config: ResurrectConfig,
    client: Client,
    scheduler: Scheduler,
    parts: ServiceParts | None = None,
) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_service(config, parts or ServiceParts(), stop, client=client, scheduler=scheduler)
    )
    try:
        await asyncio.sleep(0.2)
        if task.done():
            task.result()
        yield stop
    finally:
        stop.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(task, timeout=30)
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
