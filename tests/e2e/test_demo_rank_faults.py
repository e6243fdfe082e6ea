"""Demo scenarios about one rank or GPU on the live cluster: a GPU error line drains its
node, a stopped rank is named from the stacks and restarted in place, a slowed rank is named
a straggler with the restart arithmetic."""

from __future__ import annotations

from pathlib import Path

from support.demo_runs import DEMO_MARKS, run_demo

pytestmark = DEMO_MARKS


async def test_gpu_error_line_drains_that_node_and_the_job_finishes(
    demo_state_dir: Path, demo_references: Path
) -> None:
    """The job prints the error and the node's agent (simulated NVML) sees the same Xid."""
    result = await run_demo("gpu-error", demo_state_dir, demo_references)
    assert result["recovered"] and result["job_completed"], result
    assert result["fault_class"] == "gpu.hardware"
    assert result["drained_nodes"] == [result["injected_node"]]
    assert float(str(result["time_to_detect_s"])) < 3.0
    assert result["params_equal_uninterrupted"] is True


async def test_a_stopped_rank_is_named_and_the_job_restarts_in_place(
    demo_state_dir: Path, demo_references: Path
) -> None:
    # the demo's default length, so its uninterrupted run is the other scenarios' one
    result = await run_demo("hang", demo_state_dir, demo_references)
    assert result["recovered"] and result["job_completed"], result
    assert result["fault_class"] == "job.hang"
    assert result["action"] == "restart" and result["drained_nodes"] == []
    assert result["culprit_rank"] == result["stopped_rank"]
    assert result["culprit_node"] == result["injected_node"]
    # the demo calls a stall a hang after 10 s of silence, not after NCCL's 10-minute timeout;
    # its target (3 x step time + 10 s) is measured by the demo itself (docs/performance.md), not asserted
    # under the suite's load
    assert float(str(result["time_to_detect_s"])) < 10 + 30
    assert result["params_equal_uninterrupted"] is True
    print(
        f"\nhang demo: detect {result['time_to_detect_s']} s, culprit rank {result['culprit_rank']}"
    )


async def test_a_slowed_rank_is_named_a_straggler_with_the_restart_arithmetic(
    demo_state_dir: Path,
    demo_references: Path,
) -> None:
    result = await run_demo("straggler", demo_state_dir, demo_references)
    assert result["recovered"], result
    assert result["fault_class"] == "job.straggler"
    assert result["culprit_rank"] == result["stopped_rank"]
    assert result["culprit_node"] == result["injected_node"]
    # target: named within the policy duration (15 s in the demo's comment) + 30 s
    assert float(str(result["time_to_detect_s"])) < 15 + 30
    notes = " ".join(str(n) for n in result["recovery_notes"])  # type: ignore[attr-defined]
    assert "slowdown cost" in notes and "restart cost" in notes and "its peers wait for it" in notes
    print(f"\nstraggler demo: detect {result['time_to_detect_s']} s, rank {result['culprit_rank']}")
