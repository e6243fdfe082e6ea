"""A checkpoint folder is judged by what it holds, not by its name: a DCP ``.metadata``
makes it DCP whatever the folder is called, and a folder that fits two layouts is intact
when it is intact under either (the reason says which)."""

from __future__ import annotations

import shutil
from pathlib import Path

from checkpoint.factory import make_torch_save, truncate
from resurrect.checkpoint import verify_root

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
DCP = FIXTURES / "torch-2.15.0" / "step_1"


def _dcp_root(root: Path, names: list[str]) -> Path:
    for name in names:
        shutil.copytree(DCP, root / name)
    return root


def _by_name(verdict: object, name: str) -> tuple[bool, str]:
    cand = next(c for c in verdict.candidates if Path(c.path).name == name)  # type: ignore[attr-defined]
    return cand.valid, cand.reason


def test_intact_dcp_checkpoints_in_global_step_folders_are_intact(tmp_path: Path) -> None:
    root = _dcp_root(tmp_path, ["global_step1", "global_step2", "global_step3"])
    truncate(root / "global_step3" / "__1_0.distcp", 0.5)
    for level in ("quick", "full"):
        verdict = verify_root(root, level, recent_s=0)
        assert verdict.latest_valid == str(root / "global_step2"), verdict.note
        valid, reason = _by_name(verdict, "global_step2")
        assert valid and "DCP" in reason
        assert not _by_name(verdict, "global_step3")[0]


def test_the_same_holds_under_every_framework_name(tmp_path: Path) -> None:
    for prefix in ("iter_000000", "checkpoint-", "step-", "global_step"):
        root = _dcp_root(tmp_path / prefix, [f"{prefix}1", f"{prefix}2"])
        verdict = verify_root(root, "full", recent_s=0)
        assert verdict.latest_valid == str(root / f"{prefix}2"), (prefix, verdict.note)


def test_a_folder_fitting_two_layouts_is_intact_under_either_and_says_which(
    tmp_path: Path,
) -> None:
    root = _dcp_root(tmp_path, ["global_step1"])
    # also a DeepSpeed file set with a gap (rank 1 without rank 0): bad as DeepSpeed
    make_torch_save(root / "global_step1" / "mp_rank_01_model_states.pt", seed=1)
    valid, reason = _by_name(verify_root(root, "full", recent_s=0), "global_step1")
    assert valid
    assert "as PyTorch DCP" in reason and "not as deepspeed" in reason


def test_a_deepspeed_folder_without_dcp_metadata_is_still_judged_as_deepspeed(
    tmp_path: Path,
) -> None:
    make_torch_save(tmp_path / "global_step1" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    valid, reason = _by_name(verify_root(tmp_path, "full", recent_s=0), "global_step1")
    assert not valid and "model_states.pt" in reason
