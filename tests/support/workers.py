"""The workers of one resurrect worker process, for tests that run recoveries in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from resurrect.config import ResurrectConfig
from resurrect.scheduler.base import Scheduler
from resurrect.workers.recovery_worker import build_operator_workers, build_worker


@asynccontextmanager
async def resurrect_workers(
    client: Client, config: ResurrectConfig, scheduler: Scheduler, **options: Any
) -> AsyncIterator[Worker]:
    """The recoveries' worker (``build_worker`` with ``options``) and, as ``resurrect worker``
    runs them beside, the workers of the budget and repair workflows on their own task queues
    (the default): without them a recovery that drains would wait for ever for its budget."""
    worker = build_worker(client, config, scheduler, **options)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(worker)
        for operator in build_operator_workers(client, config, scheduler):
            await stack.enter_async_context(operator)
        yield worker
