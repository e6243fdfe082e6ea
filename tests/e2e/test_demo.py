"""The main job, as `resurrect demo` runs it: a real torchrun job on the local Slurm cluster,
a fault, the recovery, and training that ends exactly where an uninterrupted run ends."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from resurrect.demo.local_cluster import slurm_unavailable_reason
from resurrect.demo.scenario import Demo, DemoSettings
from resurrect.temporal.server import free_port

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.torch]


@pytest.fixture
def state_dir() -> Iterator[Path]:
    reason = slurm_unavailable_reason()
    if reason is not None:
        if os.environ.get("RESURRECT_REQUIRE_SLURM"):
            pytest.fail(reason)
        pytest.skip(reason)
    # jobs run as an unprivileged user: the state dir must be reachable (pytest's tmp is not)
    path = Path(tempfile.mkdtemp(prefix="resurrect-demo-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def run_demo(scenario: str, state_dir: Path) -> dict[str, object]:
    settings = DemoSettings(
        scenario=scenario,  # type: ignore[arg-type]
        state_dir=state_dir,
        ui_port=free_port(),
        timeout_s=300,
    )
    demo = Demo(settings, lambda message: print(f"[{scenario}] {message}", file=sys.stderr))
    try:
        return await demo.run()
    finally:
        await demo.close()


async def test_node_loss_resumes_from_the_last_checkpoint_and_ends_bitwise_equal(
    state_dir: Path,
) -> None:
    result = await run_demo("node-loss", state_dir)
    assert result["recovered"] and result["job_completed"], result
    assert result["fault_class"] == "node.lost"
    assert result["drained_nodes"] == [result["injected_node"]]
    assert isinstance(result["resumed_from_step"], int) and result["resumed_from_step"] > 0
    assert result["params_equal_uninterrupted"] is True
    print(
        f"\nnode-loss demo: detect {result['time_to_detect_s']} s, recover {result['time_to_recover_s']} s"
    )


async def test_damaged_newest_checkpoint_falls_back_and_still_ends_bitwise_equal(
    state_dir: Path,
) -> None:
    result = await run_demo("checkpoint-damage", state_dir)
    assert result["recovered"] and result["job_completed"], result
    damaged = Path(str(result["damaged_checkpoint"]))
    newest_step = int(damaged.parent.name.split("_")[1])
    assert result["resumed_from_step"] == newest_step - 20  # the one before the torn one
    assert ".resurrect-quarantine" in str(result["checkpoint_note"]) or "quarantin" in str(
        result["checkpoint_note"]
    )
    # moved aside, never deleted (training then wrote a fresh one of the same step)
    quarantine = damaged.parent.parent / ".resurrect-quarantine"
    [kept] = [p for p in quarantine.iterdir() if p.name.startswith(damaged.parent.name)]
    assert (kept / damaged.name).stat().st_size > 0
    assert result["params_equal_uninterrupted"] is True


async def test_gpu_error_line_drains_that_node_and_the_job_finishes(state_dir: Path) -> None:
    result = await run_demo("gpu-error", state_dir)
    assert result["recovered"] and result["job_completed"], result
    assert result["fault_class"] == "gpu.hardware"
    assert result["drained_nodes"] == [result["injected_node"]]
    assert float(str(result["time_to_detect_s"])) < 3.0
    assert result["params_equal_uninterrupted"] is True
