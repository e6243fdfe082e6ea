"""A demo plays its scenario only while resurrect's service runs beside it."""

from __future__ import annotations

import asyncio

import pytest

from resurrect.demo.scenario import _while_serving
from resurrect.demo.stage import DemoError


async def test_a_service_that_stops_first_ends_the_demo_with_its_error() -> None:
    async def crashing_service() -> None:
        raise RuntimeError("the worker could not register its task queue")

    waiting_for_a_recovery = asyncio.Event()
    service = asyncio.create_task(crashing_service())
    with pytest.raises(DemoError, match=r"service stopped before the scenario ended.*task queue"):
        await _while_serving(waiting_for_a_recovery.wait(), service)  # type: ignore[arg-type]


async def test_the_scenarios_result_while_the_service_runs() -> None:
    async def serving() -> None:
        await asyncio.Event().wait()

    async def scenario() -> dict[str, object]:
        return {"recovered": True}

    service = asyncio.create_task(serving())
    assert await _while_serving(scenario(), service) == {"recovered": True}
    assert not service.done()
    service.cancel()
