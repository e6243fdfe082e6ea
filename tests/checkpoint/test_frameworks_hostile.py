"""The frameworks' pointers are rewritten as the job's owner, and never lead outside the
root: a ``latest`` or ``last.ckpt`` that is a symlink is not followed, a link that leaves
the root is left alone, a checkpoint folder that is a link is moved aside as a link."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.checkpoint_attacks import Victim, chown_tree, job_owner, reachable_tmpdir

from checkpoint.factory import tree_snapshot, truncate
from checkpoint.test_frameworks import (
    LAYOUTS,
    Layout,
    cases,
    copy_fixture,
    what_the_framework_loads,
)
from resurrect.checkpoint import HINT_NAME, prepare_resume
from resurrect.checkpoint.as_owner import run_helper
from resurrect.checkpoint.helper import HelperRequest
from resurrect.checkpoint.layout import QUARANTINE_DIR
from resurrect.checkpoint.owner import Owner

pytestmark = pytest.mark.torch  # the damage helpers come with the torch factory

BY_NAME = {layout.fixture: layout for layout in LAYOUTS}


@pytest.fixture
def victim(tmp_path: Path) -> Victim:
    return Victim.make(tmp_path)


@pytest.fixture
def base() -> Iterator[Path]:
    yield from reachable_tmpdir()


def _tear_newest(layout: Layout, root: Path) -> None:
    newest = root / layout.newest
    truncate(newest / layout.key_file if layout.key_file else newest, 0.5)


# ------------------------------------------------------------------------- as the owner
@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to the job owner needs root")
@pytest.mark.parametrize(
    "layout", cases([BY_NAME[n] for n in ("deepspeed", "megatron_torch_dist", "lightning_link")])
)
def test_pointers_are_rewritten_by_the_helper_as_the_owner(base: Path, layout: Layout) -> None:
    owner = job_owner()
    root = copy_fixture(layout, base)
    _tear_newest(layout, root)
    chown_tree(root, owner)
    seen: list[str] = []
    request = HelperRequest(
        op="prepare", root=str(root), act=True, owner_uid=owner.uid, owner_gid=owner.gid
    )
    verdict = asyncio.run(run_helper(request, timeout_s=300, progress=seen.append))

    assert f"checkpoint helper running as uid {owner.uid} gid {owner.gid}" in seen
    previous = root / layout.previous
    assert verdict.latest_valid == str(previous), verdict
    assert what_the_framework_loads(layout, root) == previous
    made = [root / QUARANTINE_DIR, root / HINT_NAME, *root.glob("*.resurrect-bak-*")]
    made += [root / "last.ckpt"] if layout.framework == "lightning" else []
    made += [root / "latest"] if layout.framework == "deepspeed" else []
    for path in made:
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == (owner.uid, owner.gid), path


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a root not owned by the job owner")
def test_a_root_of_another_user_is_refused_and_its_pointer_left(tmp_path: Path) -> None:
    layout = BY_NAME["deepspeed"]
    root = copy_fixture(layout, tmp_path)
    _tear_newest(layout, root)
    before = tree_snapshot(root)
    verdict = prepare_resume(root, owner=Owner(54321, 54321))
    assert not verdict.verified and "not by the job's owner" in verdict.note
    assert tree_snapshot(root) == before


# --------------------------------------------------------------------- symlinks, escapes
def test_deepspeed_latest_that_is_a_symlink_is_neither_read_nor_written(
    tmp_path: Path, victim: Victim
) -> None:
    layout = BY_NAME["deepspeed"]
    root = copy_fixture(layout, tmp_path)
    _tear_newest(layout, root)
    (root / "latest").unlink()
    os.symlink(victim.target, root / "latest")
    seen = victim.snapshot()
    verdict = prepare_resume(root)
    assert "latest unreadable (symlink" in verdict.note
    assert (root / "latest").is_symlink() and victim.snapshot() == seen
    assert verdict.latest_valid == str(root / layout.previous)


@pytest.mark.parametrize("escape", ["absolute", "dotdot", "subdir"])
def test_lightning_last_link_leaving_the_root_is_left_alone(
    tmp_path: Path, victim: Victim, escape: str
) -> None:
    layout = BY_NAME["lightning_link"]
    root = copy_fixture(layout, tmp_path)
    _tear_newest(layout, root)
    link = {
        "absolute": str(victim.target),
        "dotdot": "../victim/secret.txt",
        "subdir": "sub/epoch=0-step=2.ckpt",
    }[escape]
    (root / "last.ckpt").unlink()
    os.symlink(link, root / "last.ckpt")
    seen = victim.snapshot()
    verdict = prepare_resume(root)
    assert "last.ckpt links to" in verdict.note and "left as it is" in verdict.note
    assert os.readlink(root / "last.ckpt") == link
    assert victim.snapshot() == seen
    assert verdict.latest_valid == str(root / layout.previous)


def test_lightning_last_link_to_a_damaged_checkpoint_is_repointed_not_followed(
    tmp_path: Path,
) -> None:
    layout = BY_NAME["lightning_link"]
    root = copy_fixture(layout, tmp_path)
    _tear_newest(layout, root)
    torn = (root / layout.newest).read_bytes()
    verdict = prepare_resume(root)
    assert os.readlink(root / "last.ckpt") == layout.previous
    assert f"linked last.ckpt -> {layout.previous}" in verdict.note
    (moved,) = verdict.quarantined
    assert Path(moved).read_bytes() == torn  # set aside whole, never written through the link


def test_lightning_damaged_last_file_that_cannot_be_set_aside_is_never_replaced(
    tmp_path: Path,
) -> None:
    layout = BY_NAME["lightning_copy"]
    root = copy_fixture(layout, tmp_path)
    truncate(root / "last.ckpt", 0.5)
    (root / QUARANTINE_DIR).write_text("not a folder")  # the quarantine is refused
    torn = (root / "last.ckpt").read_bytes()
    verdict = prepare_resume(root)
    assert not (root / "last.ckpt").is_symlink() and (root / "last.ckpt").read_bytes() == torn
    assert "left last.ckpt in place" in verdict.note


def test_a_checkpoint_folder_that_is_a_symlink_is_moved_aside_as_a_link(
    tmp_path: Path, victim: Victim
) -> None:
    layout = BY_NAME["hf_trainer"]
    root = copy_fixture(layout, tmp_path)
    os.symlink(victim.path / "data", root / "checkpoint-9")
    seen = victim.snapshot()
    verdict = prepare_resume(root)
    assert verdict.latest_valid == str(root / layout.newest)
    (moved,) = (Path(q) for q in verdict.quarantined)
    assert moved.is_symlink() and moved.parent == root / QUARANTINE_DIR
    assert what_the_framework_loads(layout, root) == root / layout.newest
    assert victim.snapshot() == seen


@pytest.mark.parametrize("layout", cases(LAYOUTS))
def test_observe_mode_rewrites_no_pointer(tmp_path: Path, layout: Layout) -> None:
    root = copy_fixture(layout, tmp_path)
    _tear_newest(layout, root)
    before = tree_snapshot(root)
    links = {p.name: os.readlink(p) for p in root.iterdir() if p.is_symlink()}
    verdict = prepare_resume(root, act=False)
    assert "observe mode" in verdict.note and "would " in verdict.note
    assert tree_snapshot(root) == before
    assert {p.name: os.readlink(p) for p in root.iterdir() if p.is_symlink()} == links
