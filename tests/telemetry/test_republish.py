"""Periodic gauges (resurrect/telemetry/republish.py): published at once and every interval
until the service stops, a failed pass logged and never the end of the loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from resurrect.telemetry.republish import republish_until


async def test_a_failed_pass_is_logged_and_the_next_one_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = asyncio.Event()
    passes: list[int] = []

    async def publish_once() -> None:
        passes.append(len(passes))
        if len(passes) == 1:
            raise RuntimeError("Temporal is unreachable")
        if len(passes) == 3:
            stop.set()

    with caplog.at_level(logging.WARNING, logger="resurrect.telemetry.republish"):
        await asyncio.wait_for(republish_until(stop, 0.01, publish_once, "goodput"), 10)
    assert passes == [0, 1, 2]  # ended by the stop, not by the failure
    assert [r.getMessage() for r in caplog.records] == [
        "goodput metrics not updated: Temporal is unreachable"
    ]


async def test_a_stop_ends_the_wait_before_the_interval_is_over() -> None:
    stop = asyncio.Event()
    passes = 0

    async def publish_once() -> None:
        nonlocal passes
        passes += 1
        stop.set()

    await asyncio.wait_for(republish_until(stop, 3600, publish_once, "lemon score"), 10)
    assert passes == 1


async def test_nothing_is_published_once_stopped() -> None:
    stop = asyncio.Event()
    stop.set()

    async def publish_once() -> None:
        raise AssertionError("published after the stop")

    await republish_until(stop, 0.01, publish_once, "goodput")
