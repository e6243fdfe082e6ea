"""Each kind of damage is caught, with its reason, and the previous intact checkpoint chosen."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from torch.distributed.checkpoint.filesystem import FileSystemReader

from checkpoint.factory import (
    flip_byte_at,
    flip_byte_in_tensor_data,
    make_dcp,
    make_torch_save,
    shard_files,
    truncate,
)
from resurrect.checkpoint import verify_root, write_manifest
from resurrect.contracts import CheckpointVerdict

pytestmark = pytest.mark.torch


def _dcp_root(tmp_path: Path, *, manifest: bool = False) -> Path:
    root = tmp_path / "ckpts"
    for step in (10, 20, 30):
        make_dcp(root / f"step_{step}", seed=step)
        if manifest:
            write_manifest(root / f"step_{step}")
    return root


def _by_step(verdict: CheckpointVerdict, step: int) -> tuple[bool, str]:
    cand = next(c for c in verdict.candidates if c.step == step)
    return cand.valid, cand.reason


def _largest_item(ckpt: Path) -> tuple[Path, int, int]:
    meta = FileSystemReader(str(ckpt)).read_metadata()
    info = max(meta.storage_data.values(), key=lambda i: i.length)
    return ckpt / info.relative_path, info.offset, info.length


def _truncate_shard(c: Path) -> None:
    truncate(shard_files(c)[0])


def _remove_shard(c: Path) -> None:
    shard_files(c)[0].unlink()


def _remove_metadata(c: Path) -> None:
    (c / ".metadata").unlink()


def _garble_metadata(c: Path) -> None:
    (c / ".metadata").write_bytes(b"\x80\x04garbage that is not a pickle" * 3)


def _hostile_metadata(c: Path) -> None:
    # A pickle that would call os.system if unpickled without restrictions.
    (c / ".metadata").write_bytes(b"cos\nsystem\n(S'touch /tmp/resurrect-pwned'\ntR.")


def _zero_metadata(c: Path) -> None:
    (c / ".metadata").write_bytes(b"")


def _zero_shard(c: Path) -> None:
    shard_files(c)[0].write_bytes(b"")


def _tmp_file(c: Path) -> None:
    (c / "__0_3.distcp.tmp").write_bytes(b"x" * 100)


DCP_DAMAGE: list[tuple[str, Callable[[Path], None], str]] = [
    ("truncated shard", _truncate_shard, "truncated shard"),
    ("missing shard", _remove_shard, "missing shard"),
    ("missing .metadata", _remove_metadata, "save in progress"),
    ("garbled .metadata", _garble_metadata, ".metadata garbled"),
    ("hostile .metadata", _hostile_metadata, "disallowed global"),
    ("zero-byte .metadata", _zero_metadata, "zero-byte"),
    ("zero-byte shard", _zero_shard, "zero-byte file"),
    ("unfinished tmp file", _tmp_file, "save in progress"),
]


@pytest.mark.parametrize(
    ("damage", "level"),
    [(d, lv) for d in DCP_DAMAGE for lv in ("quick", "full")],
    ids=lambda v: v[0] if isinstance(v, tuple) else v,
)
def test_dcp_damage_is_caught_and_previous_chosen(
    tmp_path: Path, damage: tuple[str, Callable[[Path], None], str], level: str
) -> None:
    _name, apply, expected = damage
    root = _dcp_root(tmp_path)
    apply(root / "step_30")
    verdict = verify_root(root, level)  # type: ignore[arg-type]
    valid, reason = _by_step(verdict, 30)
    assert not valid
    assert expected in reason
    assert verdict.latest_valid == str(root / "step_20")
    assert verdict.resume_step == 20
    assert _by_step(verdict, 20)[0] and _by_step(verdict, 10)[0]
    assert not Path("/tmp/resurrect-pwned").exists()


def test_intact_dcp_root_picks_newest(tmp_path: Path) -> None:
    root = _dcp_root(tmp_path)
    for level in ("quick", "full"):
        verdict = verify_root(root, level)
        assert verdict.verified and verdict.latest_valid == str(root / "step_30")
        assert [c.step for c in verdict.candidates] == [30, 20, 10]
        assert all(c.valid for c in verdict.candidates)


@pytest.mark.parametrize(
    ("manifest", "quick_note", "full_reason"),
    [
        pytest.param(False, "ok: DCP metadata and shard sizes", "CRC", id="dcp-crc"),
        pytest.param(True, "ok: manifest sizes", "sha256 mismatch", id="manifest-sha256"),
    ],
)
def test_corrupt_data_is_caught_at_the_full_level_only(
    tmp_path: Path, manifest: bool, quick_note: str, full_reason: str
) -> None:
    """A flipped byte inside the newest checkpoint's largest tensor: the quick level (sizes
    only) still takes it, the full level (DCP's CRCs, or the manifest's sha256) does not."""
    root = _dcp_root(tmp_path, manifest=manifest)
    shard, offset, length = _largest_item(root / "step_30")
    flip_byte_at(shard, offset + length // 2)
    quick = verify_root(root, "quick")
    assert quick.latest_valid == str(root / "step_30")
    assert quick_note in _by_step(quick, 30)[1]
    full = verify_root(root, "full")
    valid, reason = _by_step(full, 30)
    assert not valid and full_reason in reason
    assert full.latest_valid == str(root / "step_20")


def test_manifest_size_mismatch_and_missing_file_caught_at_quick_level(tmp_path: Path) -> None:
    root = _dcp_root(tmp_path, manifest=True)
    with open(shard_files(root / "step_30")[0], "ab") as fh:
        fh.write(b"extra")
    shard_files(root / "step_20")[-1].unlink()
    verdict = verify_root(root, "quick")
    assert "manifest says" in _by_step(verdict, 30)[1]
    assert "listed in the manifest but missing" in _by_step(verdict, 20)[1]
    assert verdict.latest_valid == str(root / "step_10")


def test_garbled_manifest_is_damage(tmp_path: Path) -> None:
    root = _dcp_root(tmp_path, manifest=True)
    (root / "step_30" / "resurrect-manifest.json").write_text("{not json")
    verdict = verify_root(root, "quick")
    assert "manifest unreadable" in _by_step(verdict, 30)[1]
    assert verdict.latest_valid == str(root / "step_20")


def _megatron_root(tmp_path: Path, tracker: str) -> Path:
    root = tmp_path / "megatron"
    for it in (100, 200):
        make_torch_save(root / f"iter_{it:07d}" / "mp_rank_00" / "model_optim_rng.pt", seed=it)
    (root / "latest_checkpointed_iteration.txt").write_text(tracker)
    return root


def test_megatron_tracker_pointing_at_missing_iteration(tmp_path: Path) -> None:
    root = _megatron_root(tmp_path, "300\n")
    verdict = verify_root(root, "quick")
    valid, reason = _by_step(verdict, 300)
    assert not valid and "missing iteration 300" in reason
    assert verdict.latest_valid == str(root / "iter_0000200")


def test_megatron_intact_and_newer_untracked_iteration_is_in_progress(tmp_path: Path) -> None:
    root = _megatron_root(tmp_path, "200")
    make_torch_save(root / "iter_0000300" / "mp_rank_00" / "model_optim_rng.pt", seed=3)
    verdict = verify_root(root, "full")
    assert verdict.latest_valid == str(root / "iter_0000200")
    valid, reason = _by_step(verdict, 300)
    assert not valid and "save in progress" in reason


def test_megatron_dcp_iteration(tmp_path: Path) -> None:
    root = tmp_path / "megatron"
    make_dcp(root / "iter_0000100", seed=1)
    make_dcp(root / "iter_0000200", seed=2)
    (root / "latest_checkpointed_iteration.txt").write_text("200")
    _truncate_shard(root / "iter_0000200")
    verdict = verify_root(root, "quick")
    assert verdict.latest_valid == str(root / "iter_0000100")
    assert "truncated shard" in _by_step(verdict, 200)[1]


def test_garbled_tracker_is_reported(tmp_path: Path) -> None:
    root = _megatron_root(tmp_path, "not-a-number")
    verdict = verify_root(root, "quick", recent_s=0)
    assert "garbled" in verdict.note
    assert verdict.latest_valid == str(root / "iter_0000200")


def test_torch_save_file_truncated(tmp_path: Path) -> None:
    root = tmp_path / "files"
    for step in (1, 2, 3):
        make_torch_save(root / f"checkpoint-{step}.pt", seed=step)
    truncate(root / "checkpoint-3.pt", 0.9)
    for level in ("quick", "full"):
        verdict = verify_root(root, level)
        valid, reason = _by_step(verdict, 3)
        assert not valid and "zip" in reason
        assert verdict.latest_valid == str(root / "checkpoint-2.pt")


def test_torch_save_file_zero_bytes(tmp_path: Path) -> None:
    root = tmp_path / "files"
    make_torch_save(root / "ckpt_1.pth", seed=1)
    (root / "ckpt_2.pth").write_bytes(b"")
    verdict = verify_root(root, "quick")
    assert "zero-byte" in _by_step(verdict, 2)[1]
    assert verdict.latest_valid == str(root / "ckpt_1.pth")


def test_torch_save_corrupt_data_caught_by_full_crc(tmp_path: Path) -> None:
    root = tmp_path / "files"
    make_torch_save(root / "epoch_1.ckpt", seed=1)
    make_torch_save(root / "epoch_2.ckpt", seed=2)
    flip_byte_in_tensor_data(root / "epoch_2.ckpt")
    assert verify_root(root, "quick").latest_valid == str(root / "epoch_2.ckpt")
    verdict = verify_root(root, "full")
    assert "CRC" in _by_step(verdict, 2)[1]
    assert verdict.latest_valid == str(root / "epoch_1.ckpt")


def test_recent_manifestless_dir_is_save_in_progress(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    make_torch_save(root / "global_step10" / "mp_rank_00_model_states.pt", seed=1)
    make_torch_save(root / "global_step20" / "mp_rank_00_model_states.pt", seed=2)
    old = time.time() - 3600
    for f in (root / "global_step10").iterdir():
        os.utime(f, (old, old))
    verdict = verify_root(root, "quick", recent_s=60)
    valid, reason = _by_step(verdict, 20)
    assert not valid and "save in progress" in reason
    assert verdict.latest_valid == str(root / "global_step10")
    # The same directory, once old enough, is complete.
    assert verify_root(root, "quick", recent_s=0).latest_valid == str(root / "global_step20")


def test_partial_checkpoint_name_is_save_in_progress(tmp_path: Path) -> None:
    root = tmp_path / "r"
    make_dcp(root / "step_1")
    make_dcp(root / "step_2.tmp")
    verdict = verify_root(root, "quick")
    assert "save in progress" in _by_step(verdict, 2)[1]
    assert verdict.latest_valid == str(root / "step_1")


def test_empty_and_unrecognised_directories(tmp_path: Path) -> None:
    root = tmp_path / "r"
    make_dcp(root / "step_1")
    (root / "step_2").mkdir()
    (root / "step_3").mkdir()
    (root / "step_3" / "notes.txt").write_text("hello")
    verdict = verify_root(root, "quick", recent_s=0)
    assert "empty directory" in _by_step(verdict, 2)[1]
    assert "no recognised checkpoint files" in _by_step(verdict, 3)[1]
    assert verdict.latest_valid == str(root / "step_1")


def test_safetensors_truncated(tmp_path: Path) -> None:
    import json
    import struct

    root = tmp_path / "st"
    for step, cut in ((1, False), (2, True)):
        d = root / f"checkpoint-{step}"
        d.mkdir(parents=True)
        header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
        blob = struct.pack("<Q", len(header)) + header + b"\0" * 16
        (d / "model.safetensors").write_bytes(blob[:-4] if cut else blob)
    verdict = verify_root(root, "quick", recent_s=0)
    assert "truncated" in _by_step(verdict, 2)[1]
    assert verdict.latest_valid == str(root / "checkpoint-1")
