"""The workers of one resurrect worker process, for tests that run recoveries in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from resurrect.config import ResurrectConfig
from resurrect.scheduler.base import Scheduler
from resurrect.workers.recovery_worker import build_operator_worker, build_worker


@asynccontextmanager
async def resurrect_workers(
    client: Client, config: ResurrectConfig, scheduler: Scheduler, **options: Any
) -> AsyncIterator[Worker]:
    """The recoveries' worker (``build_worker`` with ``options``) and, as ``resurrect worker``
    runs it beside, the worker of the budget and repair workflows on their own task queue
    (the default): without it a recovery that drains would wait for ever for its budget."""
    worker = build_worker(client, config, scheduler, **options)
    operator = build_operator_worker(client, config, scheduler)
    async with worker:
        if operator is None:
            yield worker
            return
        async with operator:
            yield worker
