"""Bad input gives a clear verdict, never a crash, and nothing is deleted."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from checkpoint.factory import contents, make_dcp, tree_snapshot
from resurrect.checkpoint import fsutil, prepare_resume, resume_path, verify_root

pytestmark = pytest.mark.torch


def test_missing_root(tmp_path: Path) -> None:
    root = tmp_path / "nope"
    for verdict in (verify_root(root), prepare_resume(root), prepare_resume(root, act=False)):
        assert not verdict.verified and verdict.latest_valid is None
        assert "missing" in verdict.note and str(root) in verdict.note
    assert resume_path(root) is None
    assert not root.exists()


def test_root_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    verdict = verify_root(f)
    assert not verdict.verified and "not a directory" in verdict.note


def test_symlink_loop_as_candidate_and_inside(tmp_path: Path) -> None:
    root = tmp_path / "r"
    make_dcp(root / "step_1")
    make_dcp(root / "step_2")
    os.symlink("step_3", root / "step_3")  # a link to itself
    os.symlink("loop_b", root / "step_2" / "loop_a")
    os.symlink("loop_a", root / "step_2" / "loop_b")
    os.symlink(".", root / "step_1" / "self")  # a directory link: not followed
    before = tree_snapshot(root)
    verdict = prepare_resume(root)
    by_step = {c.step: c for c in verdict.candidates}
    # Symlinks are never followed, loops or not: a checkpoint that is a link is unreadable;
    # links inside a checkpoint that nothing references are left alone.
    assert "symlink" in by_step[3].reason and not by_step[3].valid
    assert by_step[2].valid and by_step[1].valid
    assert verdict.latest_valid == str(root / "step_2")
    after = contents(tree_snapshot(root))
    assert all(blob in after for blob in contents(before))
    links = [p for p in root.rglob("*") if p.is_symlink()]
    assert len(links) == 4  # the links were moved with their checkpoints, not removed


def test_permission_error_inside_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "r"
    make_dcp(root / "step_1")
    make_dcp(root / "step_2")
    real_scandir = fsutil.scandir_names
    denied = root / "step_2"

    def scandir(path: Path) -> object:
        if path == denied:
            raise PermissionError(errno.EACCES, "Permission denied", str(denied))
        return real_scandir(path)

    monkeypatch.setattr("resurrect.checkpoint.fsutil.scandir_names", scandir)
    verdict = verify_root(root, "full")
    by_step = {c.step: c for c in verdict.candidates}
    assert not by_step[2].valid and "permission denied" in by_step[2].reason
    assert verdict.latest_valid == str(root / "step_1")


def test_permission_error_on_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_scandir = fsutil.scandir_names

    def scandir(path: Path) -> object:
        if path == tmp_path:
            raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path))
        return real_scandir(path)

    monkeypatch.setattr("resurrect.checkpoint.layout.scandir_names", scandir)
    verdict = prepare_resume(tmp_path)
    assert not verdict.verified and "permission denied" in verdict.note


def test_unreadable_file_read_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "r"
    make_dcp(root / "step_1")
    make_dcp(root / "step_2")
    meta = root / "step_2" / ".metadata"
    real_read = fsutil.read_capped

    def read_capped(path: Path, cap: int) -> bytes:
        if path == meta:
            raise PermissionError(errno.EACCES, "Permission denied", str(meta))
        return real_read(path, cap)

    monkeypatch.setattr("resurrect.checkpoint.dcp.read_capped", read_capped)
    verdict = verify_root(root, "quick")
    assert ".metadata unreadable (permission denied)" in verdict.candidates[0].reason
    assert verdict.latest_valid == str(root / "step_1")


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root + setpriv"
)
def test_real_permission_denied_as_nobody() -> None:
    """Root ignores file modes, so run the CLI as ``nobody`` against root-only directories."""
    top = Path(tempfile.mkdtemp(prefix="resurrect-perm-"))
    try:
        _check_as_nobody(top)
    finally:
        shutil.rmtree(top)


def _check_as_nobody(top: Path) -> None:
    top.chmod(0o755)
    root = top / "r"
    make_dcp(root / "step_1")
    make_dcp(root / "step_2")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (root / "step_2").chmod(0o700)
    cmd = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        sys.executable,
        "-m",
        "resurrect.checkpoint",
        "verify",
        str(root),
        "--json",
    ]
    env = {**os.environ, "HOME": "/tmp"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
    if "No module named 'resurrect'" in out.stderr:
        pytest.skip("the package is not importable as nobody")
    verdict = json.loads(out.stdout)
    by_step = {c["step"]: c for c in verdict["candidates"]}
    assert out.returncode == 0
    assert "permission denied" in by_step[2]["reason"] and not by_step[2]["valid"]
    assert verdict["latest_valid"] == str(root / "step_1")

    (root).chmod(0o700)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
    verdict = json.loads(out.stdout)
    assert out.returncode == 2 and not verdict["verified"]
    assert "permission denied" in verdict["note"]
    assert (root / "step_2" / ".metadata").exists()


def test_root_is_a_symlink_loop(tmp_path: Path) -> None:
    root = tmp_path / "loop"
    os.symlink("loop", root)
    verdict = prepare_resume(root)
    assert not verdict.verified and "symlink loop" in verdict.note
    assert resume_path(root) is None and os.path.islink(root)


def test_cannot_move_or_mark_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "r"
    make_dcp(root / "step_1")
    make_dcp(root / "step_2")
    (root / "step_2" / ".metadata").write_bytes(b"junk")

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise PermissionError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("resurrect.checkpoint.prepare.os.rename", refuse)
    monkeypatch.setattr("resurrect.checkpoint.prepare.atomic_write_text", refuse)
    monkeypatch.setattr("resurrect.checkpoint.prepare.write_hint", refuse)
    verdict = prepare_resume(root)
    assert verdict.latest_valid == str(root / "step_1") and verdict.quarantined == []
    assert "could not move or mark step_2" in verdict.note
    assert "could not write resume hint" in verdict.note
    assert (root / "step_2" / ".metadata").read_bytes() == b"junk"


def test_metadata_enum_members_pickled_by_getattr_are_allowed_but_nothing_else() -> None:
    """DCP pickles its memory-format enum as getattr(EnumClass, "NAME"); that alone is let in,
    and it yields an inert name, not torch's enum."""
    import io
    import pickle

    from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING, MetadataIndex

    from resurrect.checkpoint.dcp import AllowListRules, TorchName
    from resurrect.untrusted.plain_pickle import PlainPickleError, load_with

    class EnumByGetattr(pickle.Pickler):
        def reducer_override(self, obj: object) -> object:
            import enum

            if isinstance(obj, enum.Enum):
                return getattr, (type(obj), obj.name)
            return NotImplemented

    buffer = io.BytesIO()
    EnumByGetattr(buffer).dump(
        {"fmt": _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, "i": MetadataIndex("x")}
    )
    loaded: Any = load_with(buffer.getvalue(), AllowListRules())
    assert loaded["fmt"] == "TORCH_CONTIGUOUS_FORMAT" and isinstance(loaded["fmt"], TorchName)
    assert loaded["i"].kind == "MetadataIndex" and loaded["i"].fqn == "x"

    # getattr on an allowed class, for something that is not an enum member
    evil = b"cbuiltins\ngetattr\n(ctorch.distributed.checkpoint.metadata\nMetadataIndex\nS'__init__'\ntR."
    with pytest.raises((pickle.UnpicklingError, PlainPickleError)):
        load_with(evil, AllowListRules())
