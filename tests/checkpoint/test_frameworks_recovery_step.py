"""The recovery's ``recovery.verify_checkpoint`` step (an activity, its helper a real
subprocess) rewrites a framework's pointer: what a recovery does for a DeepSpeed job whose
newest save is torn, and what it only says in observe mode."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from checkpoint.factory import truncate
from checkpoint.test_frameworks import LAYOUTS, copy_fixture, what_the_framework_loads
from resurrect.activities.checkpoint_step import verify_checkpoint
from resurrect.contracts import JobPolicy, StepInput
from resurrect.testing.steps import make_step_input, run_step

pytestmark = pytest.mark.torch  # the damage helpers come with the torch factory

DEEPSPEED = next(layout for layout in LAYOUTS if layout.fixture == "deepspeed")


def _step_input(root: Path, *, observe: bool) -> StepInput:
    step_input = make_step_input("recovery.verify_checkpoint", observe=observe)
    bundle = step_input.bundle
    job = bundle.job.model_copy(update={"user_id": os.getuid(), "group_id": os.getgid()})
    policy = JobPolicy(checkpoint_dir=str(root))
    return step_input.model_copy(
        update={"bundle": bundle.model_copy(update={"job": job, "policy": policy})}
    )


@pytest.mark.parametrize("observe", [False, True], ids=["act", "observe"])
async def test_the_recovery_step_points_deepspeed_at_the_intact_checkpoint(
    tmp_path: Path, observe: bool
) -> None:
    root = copy_fixture(DEEPSPEED, tmp_path)
    truncate(root / DEEPSPEED.newest / DEEPSPEED.key_file, 0.5)

    result = await run_step(
        verify_checkpoint, step_input=_step_input(root, observe=observe), observe=observe
    )

    verdict = result.checkpoint
    assert verdict is not None and verdict.latest_valid == str(root / DEEPSPEED.previous)
    assert not result.stop_recovery
    if observe:
        assert (root / "latest").read_text() == DEEPSPEED.newest
        assert "would set latest to global_step2" in verdict.note
        assert result.would_have == [f"would quarantine {root / DEEPSPEED.newest}"]
    else:
        assert what_the_framework_loads(DEEPSPEED, root) == root / DEEPSPEED.previous
        assert "set latest to global_step2 (was 'global_step3'" in verdict.note
