"""The sensor registry: the service starts what the configuration enables, part by part,
and a new sensor is one entry."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from support.builders import make_config

from resurrect.contracts import Interruption
from resurrect.sensors import registry
from resurrect.sensors.registry import (
    SensorContext,
    SensorSpec,
    enabled_sensors,
    start_sensors,
)
from resurrect.testing import FakeScheduler


def names(specs: list[SensorSpec]) -> list[str]:
    return [spec.name for spec in specs]


def test_the_watcher_part_runs_the_slurm_watcher_and_what_the_config_enables() -> None:
    quiet = make_config(telemetry={"enabled": False})
    assert names(enabled_sensors(quiet, ["watcher"])) == ["watcher"]
    busy = make_config(telemetry={"goodput_interval_s": 60}, liveness={"collector": True})
    assert names(enabled_sensors(busy, ["watcher"])) == [
        "watcher",
        "goodput-metrics",
        "lemon-metrics",
        "liveness-collector",
    ]
    no_lemons = make_config(telemetry={"goodput_interval_s": 60}, lemons={"enabled": False})
    assert "lemon-metrics" not in names(enabled_sensors(no_lemons, ["watcher"]))


def test_the_follower_part_runs_the_log_follower_unless_the_config_turns_it_off() -> None:
    assert names(enabled_sensors(make_config(), ["follower"])) == ["log-follower"]
    off = make_config(watcher={"follow_logs": False})
    assert enabled_sensors(off, ["follower"]) == []
    assert "log-follower" not in names(enabled_sensors(make_config(), ["watcher"]))


async def test_a_registered_sensor_is_started_with_the_services_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[SensorContext] = []

    async def start(ctx: SensorContext, stop: asyncio.Event) -> asyncio.Task[None]:
        started.append(ctx)
        return asyncio.create_task(stop.wait(), name="probe")

    probe = SensorSpec("probe", "watcher", lambda c: True, start)
    monkeypatch.setattr(registry, "SENSORS", (probe,))

    async def report(interruption: Interruption) -> str:
        return "recover/x"

    stop = asyncio.Event()
    client: Any = object()
    async with contextlib.AsyncExitStack() as stack:
        ctx = SensorContext(make_config(), client, FakeScheduler(), report, stack)
        [task] = await start_sensors(ctx, ["watcher"], stop)
        assert started == [ctx] and task.get_name() == "probe"
        assert await start_sensors(ctx, ["follower"], stop) == []
        stop.set()
        await task
