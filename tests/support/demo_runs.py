"""Running a demo scenario (``resurrect demo``) from a live test, with the suite's limits
(the state and reference directories come from ``tests/e2e/conftest.py``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from resurrect.demo.scenario import Demo, DemoSettings
from resurrect.temporal.server import free_port

DEMO_MARKS = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.torch, pytest.mark.long_running]


async def run_demo(
    scenario: str, state_dir: Path, reference_dir: Path, **overrides: Any
) -> dict[str, object]:
    settings = DemoSettings(
        scenario=scenario,
        state_dir=state_dir,
        ui_port=free_port(),
        timeout_s=300,
        reference_dir=reference_dir,
        **overrides,
    )
    demo = Demo(settings, lambda message: print(f"[{scenario}] {message}", file=sys.stderr))
    try:
        return await demo.run()
    finally:
        await demo.close()
