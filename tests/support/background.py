"""resurrect's service on its own event loop in a thread, for module-scoped scenarios that
several tests (and outside processes: Prometheus, a browser) look at while it runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.scheduler.base import Scheduler
from resurrect.service import ServiceParts, run_service
from resurrect.temporal.client import connect

T = TypeVar("T")


class BackgroundService:
    def __init__(self, config: ResurrectConfig, address: str, scheduler: Scheduler) -> None:
        self.config = config
        self.address = address
        self.scheduler = scheduler
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 300) -> T:
        """Run ``coro`` on the service's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> None:
        self.thread.start()

        async def begin() -> None:
            self.client = await connect(self.config.temporal, address=self.address, attempts=10)
            self._stop = asyncio.Event()
            self._task = asyncio.create_task(
                run_service(
                    self.config, ServiceParts(), self._stop, client=self.client,
                    scheduler=self.scheduler,
                )
            )  # fmt: skip
            await asyncio.sleep(0.2)
            if self._task.done():
                self._task.result()

        self.call(begin())

    def stop(self) -> None:
        async def end() -> None:
            if self._stop is not None and self._task is not None:
                self._stop.set()
                await asyncio.wait_for(self._task, timeout=30)

        try:
            self.call(end(), timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
