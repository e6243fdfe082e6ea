"""Node agents' probe workers in the test process, and waiting for a recovery to start."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from temporalio.client import Client
from temporalio.service import RPCError

from resurrect.sensors.node_agent.stack_probe import serve_probes


@contextlib.asynccontextmanager
async def node_agents(client: Client, cluster: str, nodes: list[str]) -> AsyncIterator[None]:
    """Each node's agent probe worker (what `resurrect agent run` starts beside its watch)."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(serve_probes(client, cluster, node, stop)) for node in nodes]
    try:
        await asyncio.sleep(0.5)
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


async def workflow_started(client: Client, workflow_id: str, timeout: float) -> float:
    """The wall-clock time ``workflow_id`` was seen to exist (polled every 0.2 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(workflow_id).describe()
            return time.time()
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} did not start within {timeout} s")
