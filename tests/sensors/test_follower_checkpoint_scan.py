"""The hang check must stay cheap however big the job's checkpoint directory gets, and a
hostile directory (a FIFO, symlinks, a huge listing) must not block or exhaust it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from support.clock import Clock

from resurrect.sensors.checkpoint_progress import NEWEST_KEPT, CheckpointProgress
from resurrect.sensors.log_follower import hang_check_interval


def make_tree(root: Path, entries: int) -> None:
    root.mkdir()
    old = time.time() - 3600
    for index in range(entries):
        path = root / f"shard-{index:06d}.bin"
        path.write_bytes(b"x")
        os.utime(path, (old, old))
    (root / "step_000100").mkdir()
    (root / "step_000100" / "model.pt").write_bytes(b"m")
    for path in (root / "step_000100" / "model.pt", root / "step_000100", root):
        os.utime(path, (old, old))


def test_looks_are_rate_limited_and_cost_no_full_listing(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    make_tree(root, 5000)
    clock = Clock()
    progress = CheckpointProgress(str(root), min_interval_s=5, clock=clock)
    assert progress.changed() is False  # the first look only remembers
    first_cost = progress.fs_ops
    assert first_cost > 5000  # one full look when following starts
    for _ in range(19):  # the follower polls every 0.25 s: nothing is touched in between
        clock.now += 0.25
        assert progress.changed() is False
    assert progress.fs_ops == first_cost
    clock.now += 5
    assert progress.changed() is False
    # a quiet look: the directory, the newest few entries, the newest save's listing + entry
    assert progress.fs_ops - first_cost == 1 + NEWEST_KEPT + 2


def test_new_saves_and_writes_in_the_newest_save_are_progress(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    make_tree(root, 200)
    clock = Clock()
    progress = CheckpointProgress(str(root), min_interval_s=5, clock=clock)
    progress.changed()
    (root / "step_000200").mkdir()
    clock.now += 5
    assert progress.changed() is True
    before = progress.fs_ops
    (root / "step_000200" / "model.pt").write_bytes(b"partial")
    clock.now += 5
    assert progress.changed() is True  # a save in progress, in place
    assert progress.fs_ops - before < 12  # only the new name was stat'ed, not all 200
    clock.now += 5
    assert progress.changed() is False


def test_a_full_look_confirms_before_a_hang_is_called(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    make_tree(root, 300)
    progress = CheckpointProgress(str(root), min_interval_s=5, clock=Clock())
    progress.changed()
    assert progress.changed_since(time.time() - 60) is False
    (root / "shard-000007.bin").write_bytes(b"rewritten in place, among old ones")
    assert progress.changed_since(time.time() - 60) is True


def test_a_hostile_checkpoint_dir_blocks_nothing(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    for target in (fifo, Path("/dev/zero"), tmp_path / "missing"):
        progress = CheckpointProgress(str(target), min_interval_s=5, clock=Clock())
        assert progress.changed() is False
        assert progress.changed_since(0) is False
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "loop").symlink_to(root)
    (root / "zero").symlink_to("/dev/zero")
    (root / "pipe").symlink_to(fifo)
    progress = CheckpointProgress(str(root), min_interval_s=5, clock=Clock())
    progress.changed()
    progress.changed_since(0)
    assert time.monotonic() - started < 2


def test_the_look_interval_follows_the_hang_threshold() -> None:
    assert hang_check_interval(30) == 5
    assert hang_check_interval(600) == 60
