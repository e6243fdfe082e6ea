"""prepare_resume and resume_path: fall back to the newest intact checkpoint, lose nothing."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from checkpoint.factory import (
    contents,
    make_dcp,
    make_torch_save,
    shard_files,
    tree_snapshot,
    truncate,
)
from resurrect.checkpoint import HINT_NAME, prepare_resume, resume_path, write_manifest
from resurrect.checkpoint.layout import QUARANTINE_DIR
from resurrect.checkpoint.prepare import set_aside_after

pytestmark = pytest.mark.torch


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "ckpts"
    for step in (10, 20, 30, 40):
        make_dcp(root / f"step_{step}", seed=step)
        write_manifest(root / f"step_{step}")
    return root


def _mtimes(root: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.stat().st_mtime_ns
    return out


def test_quarantines_damaged_newest_and_writes_hint(tmp_path: Path) -> None:
    root = _root(tmp_path)
    truncate(shard_files(root / "step_40")[0])
    (root / "step_30" / ".metadata").write_bytes(b"junk")
    before = contents(tree_snapshot(root))

    verdict = prepare_resume(root)

    assert verdict.latest_valid == str(root / "step_20") and verdict.resume_step == 20
    assert len(verdict.quarantined) == 2
    moved = {Path(p).name.split("-")[0] for p in verdict.quarantined}
    assert moved == {"step_30", "step_40"}
    for p in verdict.quarantined:
        assert Path(p).parent == root / ".resurrect-quarantine" and Path(p).is_dir()
    assert not (root / "step_40").exists() and not (root / "step_30").exists()
    hint = json.loads((root / HINT_NAME).read_text())
    assert hint["name"] == "step_20" and hint["step"] == 20
    assert resume_path(root) == root / "step_20"
    # Nothing deleted: every byte that existed before still exists somewhere under root.
    after = contents(tree_snapshot(root))
    assert all(blob in after for blob in before)


def test_observe_mode_changes_nothing(tmp_path: Path) -> None:
    root = _root(tmp_path)
    truncate(shard_files(root / "step_40")[0])
    before, times = tree_snapshot(root), _mtimes(root)
    verdict = prepare_resume(root, act=False)
    assert verdict.latest_valid == str(root / "step_30")
    assert verdict.quarantined == [str(root / "step_40")]  # would be set aside
    assert "observe mode" in verdict.note and "would move step_40" in verdict.note
    assert tree_snapshot(root) == before and _mtimes(root) == times


def test_full_level_sha_mismatch_quarantined(tmp_path: Path) -> None:
    root = _root(tmp_path)
    shard = shard_files(root / "step_40")[0]
    with open(shard, "r+b") as fh:
        fh.seek(100)
        b = fh.read(1)
        fh.seek(100)
        fh.write(bytes([b[0] ^ 1]))
    assert prepare_resume(root, level="quick", act=False).latest_valid == str(root / "step_40")
    verdict = prepare_resume(root, level="full")
    assert verdict.latest_valid == str(root / "step_30")
    assert len(verdict.quarantined) == 1
    assert resume_path(root) == root / "step_30"


def test_nothing_intact_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "r"
    make_dcp(root / "step_1")
    (root / "step_1" / ".metadata").unlink()
    before = tree_snapshot(root)
    verdict = prepare_resume(root)
    assert verdict.verified and verdict.latest_valid is None
    assert "no intact checkpoint" in verdict.note and "from scratch" in verdict.note
    assert tree_snapshot(root) == before
    assert resume_path(root) is None


def test_empty_root_means_start_from_scratch(tmp_path: Path) -> None:
    verdict = prepare_resume(tmp_path)
    assert verdict.verified and verdict.latest_valid is None
    assert "no checkpoints found" in verdict.note
    assert resume_path(tmp_path) is None


def test_megatron_tracker_rewritten_with_backup(tmp_path: Path) -> None:
    root = tmp_path / "m"
    for it in (100, 200):
        make_torch_save(root / f"iter_{it:07d}" / "mp_rank_00" / "model_optim_rng.pt", seed=it)
    tracker = root / "latest_checkpointed_iteration.txt"
    tracker.write_text("300")
    verdict = prepare_resume(root)
    assert verdict.latest_valid == str(root / "iter_0000200")
    assert tracker.read_text().strip() == "200"
    backups = list(root.glob("latest_checkpointed_iteration.txt.resurrect-bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == "300"
    assert "set latest_checkpointed_iteration.txt to 200" in verdict.note
    assert resume_path(root) == root / "iter_0000200"


def test_marker_written_when_move_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path)
    truncate(shard_files(root / "step_40")[0])

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("resurrect.checkpoint.prepare.os.rename", refuse)
    verdict = prepare_resume(root)
    marker = root / "step_40.resurrect-damaged"
    assert verdict.quarantined == [str(marker)] and marker.is_file()
    assert (root / "step_40").is_dir()
    assert "marked step_40 damaged" in verdict.note
    monkeypatch.undo()
    # The marked checkpoint is skipped from now on, even if its files were repaired.
    assert resume_path(root) == root / "step_30"


def test_stale_hint_never_rolls_back(tmp_path: Path) -> None:
    root = _root(tmp_path)
    truncate(shard_files(root / "step_40")[0])
    prepare_resume(root)
    assert resume_path(root) == root / "step_30"
    make_dcp(root / "step_50", seed=50)  # the resumed job saved again
    write_manifest(root / "step_50")
    assert resume_path(root) == root / "step_50"


def test_hint_honoured_and_bad_hint_ignored(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / HINT_NAME).write_text(json.dumps({"name": "step_20", "step": 20}))
    # Newer intact checkpoints than the hint win (they were saved after it).
    assert resume_path(root) == root / "step_40"
    (root / HINT_NAME).write_text(json.dumps({"name": "step_99", "step": 99}))
    assert resume_path(root) == root / "step_40"
    (root / HINT_NAME).write_text(json.dumps({"name": "../etc", "step": 1}))
    assert resume_path(root) == root / "step_40"
    (root / HINT_NAME).write_text("{garbage")
    assert resume_path(root) == root / "step_40"


def test_hint_names_checkpoint_outside_step_naming(tmp_path: Path) -> None:
    root = _root(tmp_path)
    for step in (30, 40):
        (root / f"step_{step}" / ".metadata").write_bytes(b"")
    prepare_resume(root)
    assert resume_path(root) == root / "step_20"


def test_quarantine_names_do_not_collide(tmp_path: Path) -> None:
    root = _root(tmp_path)
    truncate(shard_files(root / "step_40")[0])
    first = prepare_resume(root).quarantined
    make_dcp(root / "step_40", seed=4)
    (root / "step_40" / ".metadata").unlink()
    os.utime(root / "step_40", (1, 1))
    for f in (root / "step_40").iterdir():
        os.utime(f, (1, 1))
    second = prepare_resume(root).quarantined
    assert len(first) == 1 and len(second) == 1 and first != second
    assert Path(first[0]).is_dir() and Path(second[0]).is_dir()


def test_recent_in_progress_save_left_in_place(tmp_path: Path) -> None:
    root = _root(tmp_path)
    make_dcp(root / "step_50", seed=5)
    (root / "step_50" / ".metadata").unlink()
    verdict = prepare_resume(root)
    assert verdict.latest_valid == str(root / "step_40")
    assert (root / "step_50").is_dir() and verdict.quarantined == []
    assert "left step_50 in place" in verdict.note


def test_what_this_recovery_set_aside_before_is_reported_when_it_looks_again(
    tmp_path: Path,
) -> None:
    """An attempt of the step that was stopped after its move leaves the torn checkpoint in
    the quarantine; the attempt that runs again finds nothing torn, and says what was set
    aside since the recovery began (the next recovery, beginning later, does not)."""
    root = _root(tmp_path)
    truncate(shard_files(root / "step_40")[0])
    began = time.time() - 5
    first = prepare_resume(root, set_aside_since=began)
    (moved,) = first.quarantined
    again = prepare_resume(root, set_aside_since=began)
    assert again.latest_valid == str(root / "step_30")
    assert again.quarantined == [moved]
    assert (
        f"{Path(moved).name} was set aside into {QUARANTINE_DIR} earlier in this recovery"
        in again.note
    )
    later = prepare_resume(root, set_aside_since=time.time() + 2)
    assert later.quarantined == [] and "set aside" not in later.note
    assert prepare_resume(root).quarantined == []  # no beginning given: nothing looked up


def test_the_quarantines_names_are_read_within_bounds_and_forged_ones_claim_nothing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ckpts"
    folder = root / QUARANTINE_DIR
    folder.mkdir(parents=True)
    began = time.time() - 60
    stamp = datetime.fromtimestamp(began + 30, UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (
        f"step_9-{stamp}",  # set aside since the beginning
        f"step_8-{stamp}.2",  # a collision's name
        "step_7-20000101T000000Z",  # before it: an earlier recovery's
        "step_6-29991231T235959Z",  # after now: not anybody's set-aside
        "step_5-20261399T999999Z",  # no date
        f"step\x1b[2J-{stamp}",  # a control character in the name
        "no-stamp-at-all",
    ):
        (folder / name).mkdir()
    found = [p.name for p in set_aside_after(root, began)]
    assert found == [f"step_8-{stamp}.2", f"step_9-{stamp}"] or found == [
        f"step_9-{stamp}",
        f"step_8-{stamp}.2",
    ]
    # a folder of many names costs the limit, not its size
    for index in range(300):
        (folder / f"junk-{index}").touch()
    assert len(set_aside_after(root, began, limit=50)) <= 2
    # a quarantine that is a symlink or a file holds nothing
    folder.rename(tmp_path / "elsewhere")
    folder.symlink_to(tmp_path / "elsewhere")
    assert set_aside_after(root, began) == []
    folder.unlink()
    folder.write_text("not a folder")
    assert set_aside_after(root, began) == []
