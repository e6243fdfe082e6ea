"""Symlinks, FIFOs and foreign directories planted in a checkpoint tree change nothing
outside it, block nothing, and get a clear note."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.checkpoint_attacks import Victim

from checkpoint.factory import make_dcp, shard_files, truncate
from resurrect.checkpoint import HINT_NAME, prepare_resume, resume_path, verify_root, write_manifest
from resurrect.checkpoint.as_owner import run_helper
from resurrect.checkpoint.fsutil import anchored, open_regular
from resurrect.checkpoint.helper import HelperRequest
from resurrect.checkpoint.layout import DAMAGE_MARKER_SUFFIX, QUARANTINE_DIR, TRACKER_NAME
from resurrect.checkpoint.owner import Owner

pytestmark = pytest.mark.torch


@pytest.fixture
def victim(tmp_path: Path) -> Victim:
    return Victim.make(tmp_path)


def _damaged_root(tmp_path: Path, names: tuple[str, str] = ("step_1", "step_2")) -> Path:
    root = tmp_path / "job"
    make_dcp(root / names[0], seed=1)
    make_dcp(root / names[1], seed=2)
    truncate(shard_files(root / names[1])[0])
    return root


def _owner_of(path: Path) -> Owner:
    st = path.stat()
    return Owner(st.st_uid, st.st_gid)


def _still_serves(root: Path) -> None:
    """The service goes on: a good checkpoint saved afterwards is the one to resume."""
    make_dcp(root / "step_50", seed=50)
    verdict = prepare_resume(root)
    assert verdict.latest_valid == str(root / "step_50"), verdict


def test_tracker_backup_never_follows_a_planted_symlink(tmp_path: Path, victim: Victim) -> None:
    root = _damaged_root(tmp_path, ("iter_0000001", "iter_0000002"))
    (root / TRACKER_NAME).write_text("2\n")
    before = victim.snapshot()
    now = datetime.now(UTC)
    planted = []
    for s in range(-2, 120):  # the backup name is predictable: plant it for every second
        stamp = (now + timedelta(seconds=s)).strftime("%Y%m%dT%H%M%SZ")
        link = root / f"{TRACKER_NAME}.resurrect-bak-{stamp}"
        os.symlink(victim.target, link)
        planted.append(link)
    verdict = prepare_resume(root)
    assert victim.snapshot() == before
    assert (root / TRACKER_NAME).read_text() == "1\n"
    assert f"set {TRACKER_NAME} to 1" in verdict.note
    backups = [p for p in planted if not p.is_symlink()]
    assert len(backups) == 1 and backups[0].read_text() == "2\n"  # the link was replaced
    _still_serves(root)


def test_tracker_that_is_a_symlink_is_not_read_or_written(tmp_path: Path, victim: Victim) -> None:
    root = _damaged_root(tmp_path, ("iter_0000001", "iter_0000002"))
    victim.target.write_text("2\n")
    before = victim.snapshot()
    os.symlink(victim.target, root / TRACKER_NAME)
    verdict = prepare_resume(root)
    assert victim.snapshot() == before
    assert f"{TRACKER_NAME} unreadable (symlink" in verdict.note
    assert (root / TRACKER_NAME).is_symlink()
    _still_serves(root)


def test_quarantine_symlink_is_refused_and_the_checkpoint_marked(
    tmp_path: Path, victim: Victim
) -> None:
    root = _damaged_root(tmp_path)
    os.symlink(victim.path / "data", root / QUARANTINE_DIR)
    # The marker name is planted too: marking must replace the link, not write through it.
    os.symlink(victim.target, root / f"step_2{DAMAGE_MARKER_SUFFIX}")
    before = victim.snapshot()
    verdict = prepare_resume(root)
    assert victim.snapshot() == before
    assert (root / "step_2").is_dir()  # not moved anywhere
    assert f"{QUARANTINE_DIR} is a symlink; refusing to quarantine" in verdict.note
    marker = root / f"step_2{DAMAGE_MARKER_SUFFIX}"
    assert verdict.quarantined == [str(marker)] and marker.is_file() and not marker.is_symlink()
    assert verdict.latest_valid == str(root / "step_1")
    _still_serves(root)


def test_quarantine_that_is_a_file_or_foreign_dir_is_refused(
    tmp_path: Path, victim: Victim
) -> None:
    root = _damaged_root(tmp_path)
    (root / QUARANTINE_DIR).write_text("not a folder")
    verdict = prepare_resume(root)
    assert f"{QUARANTINE_DIR} is not a directory; refusing to quarantine" in verdict.note
    assert (root / "step_2").is_dir()
    if os.geteuid() == 0:  # a quarantine folder that someone else owns
        (root / QUARANTINE_DIR).unlink()
        (root / f"step_2{DAMAGE_MARKER_SUFFIX}").unlink()
        (root / QUARANTINE_DIR).mkdir()
        os.chown(root / QUARANTINE_DIR, 54321, 54321)
        verdict = prepare_resume(root)
        assert "owned by uid 54321" in verdict.note and (root / "step_2").is_dir()
        assert list((root / QUARANTINE_DIR).iterdir()) == []


def test_hint_symlink_is_replaced_not_followed(tmp_path: Path, victim: Victim) -> None:
    root = _damaged_root(tmp_path)
    os.symlink(victim.target, root / HINT_NAME)
    before = victim.snapshot()
    verdict = prepare_resume(root)
    assert victim.snapshot() == before
    assert "wrote resume hint -> step_1" in verdict.note
    assert not (root / HINT_NAME).is_symlink() and "step_1" in (root / HINT_NAME).read_text()


def test_symlinked_middle_component_is_not_followed(tmp_path: Path, victim: Victim) -> None:
    root = _damaged_root(tmp_path)
    os.symlink(victim.path / "data", root / "step_1" / "sub")
    with anchored(root), pytest.raises(OSError) as err:
        open_regular(root / "step_1" / "sub" / "step_9" / "weights.pt")
    assert err.value.errno in (errno.ELOOP, errno.ENOTDIR)
    # A manifest listing a file behind the link: the file is not read through it.
    make_dcp(root / "step_3", seed=3)
    os.symlink(victim.path / "data" / "step_9", root / "step_3" / "sub")
    write_manifest(root / "step_3")  # follows nothing either: the link is left out
    verdict = verify_root(root, "full")
    assert verdict.latest_valid == str(root / "step_3")


@pytest.mark.parametrize(
    "where", [".metadata", "shard", TRACKER_NAME, "resurrect-manifest.json", "step_5.pt"]
)
def test_fifos_never_block(tmp_path: Path, where: str) -> None:
    root = _damaged_root(tmp_path, ("iter_0000001", "iter_0000002"))
    if where == ".metadata":
        (root / "iter_0000002" / ".metadata").unlink()
        os.mkfifo(root / "iter_0000002" / ".metadata")
    elif where == "shard":
        shard = shard_files(root / "iter_0000002")[0]
        shard.unlink()
        os.mkfifo(shard)
    elif where == "resurrect-manifest.json":
        os.mkfifo(root / "iter_0000002" / where)
    else:
        os.mkfifo(root / where)
    request = HelperRequest(
        op="prepare", root=str(root), level="full", act=True, **_owner_fields(root)
    )
    started = time.monotonic()
    verdict = asyncio.run(run_helper(request, timeout_s=60))
    assert time.monotonic() - started < 30
    assert verdict.verified, verdict.note
    said = verdict.note + " ".join(c.reason for c in verdict.candidates)
    if where in (".metadata", TRACKER_NAME, "step_5.pt"):  # the others are simply not listed
        assert "not a regular file (FIFO)" in said, said
    assert verdict.latest_valid == str(root / "iter_0000001")
    _still_serves(root)


def _owner_fields(root: Path) -> dict[str, int]:
    owner = _owner_of(root)
    return {"owner_uid": owner.uid, "owner_gid": owner.gid}


def test_root_not_owned_by_the_job_owner_is_refused(tmp_path: Path) -> None:
    root = _damaged_root(tmp_path)
    mine = _owner_of(root)
    stranger = Owner(mine.uid + 4242, mine.gid)
    verdict = prepare_resume(root, owner=stranger)
    assert not verdict.verified and "not by the job's owner" in verdict.note
    assert not (root / HINT_NAME).exists() and not (root / QUARANTINE_DIR).exists()
    assert prepare_resume(root, owner=mine).latest_valid == str(root / "step_1")


def test_world_writable_root_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    root = _damaged_root(tmp_path)
    root.chmod(0o777)
    verdict = prepare_resume(root, owner=_owner_of(root))
    assert not verdict.verified and "writable by every user" in verdict.note
    assert not (root / HINT_NAME).exists()
    root.chmod(0o1777)  # sticky: others cannot rename or delete what is not theirs
    assert prepare_resume(root, owner=_owner_of(root)).latest_valid == str(root / "step_1")


def test_deeply_nested_json_in_manifest_and_hint_is_a_note_not_a_crash(tmp_path: Path) -> None:
    root = _damaged_root(tmp_path)
    make_dcp(root / "step_3", seed=3)
    deep = "[" * 200_000 + "]" * 200_000
    (root / "step_3" / "resurrect-manifest.json").write_text(deep)
    (root / HINT_NAME).write_text(deep)
    verdict = prepare_resume(root)
    assert "manifest unreadable" in verdict.candidates[0].reason
    assert verdict.latest_valid == str(root / "step_1")
    (root / HINT_NAME).write_text(deep)
    assert resume_path(root) == root / "step_1"
