"""The main job, as `resurrect demo` runs it: a real torchrun job on the local Slurm cluster
loses a node; the recovery drains it and training ends exactly where an uninterrupted run
ends, with what the interruption cost."""

from __future__ import annotations

from pathlib import Path

from support.demo_runs import DEMO_MARKS, run_demo

pytestmark = DEMO_MARKS


async def test_node_loss_resumes_from_the_last_checkpoint_and_ends_bitwise_equal(
    demo_state_dir: Path,
    demo_references: Path,
) -> None:
    result = await run_demo("node-loss", demo_state_dir, demo_references)
    assert result["recovered"] and result["job_completed"], result
    assert result["fault_class"] == "node.lost"
    assert result["drained_nodes"] == [result["injected_node"]]
    assert isinstance(result["resumed_from_step"], int) and result["resumed_from_step"] > 0
    assert result["params_equal_uninterrupted"] is True
    # what the interruption cost, from the job's own progress lines and the recovery history
    goodput, lost = result["goodput"], result["lost_s"]
    assert isinstance(goodput, float) and 0 < goodput < 1, result
    assert isinstance(lost, dict) and set(lost) == {
        "startup", "recompute", "detection", "recovery", "queue"
    }  # fmt: skip
    assert lost["detection"] > 0 and lost["recovery"] > 0 and lost["startup"] > 0, lost
    print(
        f"\nnode-loss demo: detect {result['time_to_detect_s']} s, recover {result['time_to_recover_s']} s,"
        f" goodput {goodput:.1%}, lost {lost}"
    )
