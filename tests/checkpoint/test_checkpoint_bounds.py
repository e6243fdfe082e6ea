"""Zip bombs, huge and sparse files: verification work stays bounded in bytes and time,
and nothing of it outlives its deadline."""

from __future__ import annotations

import asyncio
import json
import struct
import time
import zipfile
from pathlib import Path

import pytest
from support.checkpoint_attacks import HelperProcesses

from checkpoint.factory import make_dcp, make_torch_save
from resurrect.checkpoint import MANIFEST_NAME, verify_root
from resurrect.checkpoint.as_owner import run_helper
from resurrect.checkpoint.helper import HelperRequest
from resurrect.checkpoint.limits import VerifyLimits
from resurrect.checkpoint.zipcheck import ZipDamage, check_archive

pytestmark = pytest.mark.torch

BOMB_MIB = 512
TIB = 1 << 40


def make_zip_bomb(path: Path, inflated_mib: int = BOMB_MIB) -> None:
    """A torch.save-shaped zip whose one deflated member inflates to ``inflated_mib`` MiB
    (~0.1% of that on disk), like the one from the issue."""
    block = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr(zipfile.ZipInfo("archive/data.pkl"), b"\x80\x02}q\x00.")
        with zf.open("archive/data/0", "w", force_zip64=True) as member:
            for _ in range(inflated_mib):
                member.write(block)


def lie_about_size(path: Path, member: str, declared: int) -> None:
    """Rewrite ``member``'s uncompressed size in both headers (a bomb that lies)."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    data = bytearray(path.read_bytes())
    # zip64 extra field in the local header: header id 1, then uncompressed, compressed
    local = info.header_offset
    name_len, extra_len = struct.unpack_from("<HH", data, local + 26)
    extra = local + 30 + name_len
    if extra_len >= 20 and struct.unpack_from("<H", data, extra)[0] == 1:
        struct.pack_into("<Q", data, extra + 4, declared)
    else:
        struct.pack_into("<I", data, local + 22, declared)
    # central directory entry
    cd = data.find(b"PK\x01\x02", local)
    while cd != -1:
        n_len, _extra_len = struct.unpack_from("<HH", data, cd + 28)
        if data[cd + 46 : cd + 46 + n_len] == member.encode():
            if struct.unpack_from("<I", data, cd + 24)[0] == 0xFFFFFFFF:
                struct.pack_into("<Q", data, cd + 46 + n_len + 4, declared)
            else:
                struct.pack_into("<I", data, cd + 24, declared)
            break
        cd = data.find(b"PK\x01\x02", cd + 4)
    path.write_bytes(bytes(data))


def _inflate_count(path: Path, limits: VerifyLimits) -> tuple[int, float, str]:
    counted = 0

    def sink(n: int) -> None:
        nonlocal counted
        counted += n

    started = time.monotonic()
    try:
        check_archive(path, full=True, on_bytes=sink, limits=limits)
        outcome = "ok"
    except ZipDamage as exc:
        outcome = f"damage: {exc}"
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    return counted, time.monotonic() - started, outcome


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bomb") / "step_2.pt"
    make_zip_bomb(path)
    assert path.stat().st_size < 1 << 20  # ~0.5 MiB on disk
    return path


def test_zip_bomb_is_refused_before_inflating(bomb: Path, tmp_path: Path) -> None:
    counted, seconds, outcome = _inflate_count(bomb, VerifyLimits())
    assert counted == 0 and seconds < 5
    assert "compression ratio" in outcome and "zip bomb" in outcome
    root = tmp_path / "job"
    make_torch_save(root / "step_1.pt", seed=1)
    (root / "step_2.pt").write_bytes(bomb.read_bytes())
    verdict = verify_root(root, "full")
    assert "zip bomb" in verdict.candidates[0].reason and not verdict.candidates[0].valid
    assert verdict.latest_valid == str(root / "step_1.pt")


def test_inflation_cap_holds_when_the_ratio_is_allowed(bomb: Path) -> None:
    limits = VerifyLimits(max_compression_ratio=1e9, max_inflated_bytes=8 << 20)
    counted, _seconds, outcome = _inflate_count(bomb, limits)
    assert counted <= 64 and "exceed 8 MiB inflated" in outcome  # only the stored data.pkl


def test_a_bomb_that_lies_about_its_size_stops_at_the_declared_size(
    bomb: Path, tmp_path: Path
) -> None:
    liar = tmp_path / "liar.pt"
    liar.write_bytes(bomb.read_bytes())
    lie_about_size(liar, "archive/data/0", 1 << 20)
    counted, _seconds, outcome = _inflate_count(liar, VerifyLimits(max_compression_ratio=1e9))
    assert counted <= (1 << 20) + 64
    assert outcome.startswith("damage")


def _manifest(ckpt: Path, files: dict[str, int]) -> None:
    entries = [{"path": rel, "size": size, "sha256": "0" * 64} for rel, size in files.items()]
    (ckpt / MANIFEST_NAME).write_text(json.dumps({"version": 1, "files": entries}))


def test_huge_sparse_file_is_not_read_in_full(tmp_path: Path) -> None:
    root = tmp_path / "job"
    ckpt = make_dcp(root / "step_1", seed=1)
    with open(ckpt / "huge.dat", "wb") as fh:
        fh.truncate(TIB)  # 1 TiB, no blocks
    _manifest(ckpt, {"huge.dat": TIB})
    started = time.monotonic()
    verdict = verify_root(root, "full")
    assert time.monotonic() - started < 20
    reason = verdict.candidates[0].reason
    assert "huge.dat too large to verify fully" in reason
    assert verdict.latest_valid == str(ckpt)  # quick-level checks passed: the policy


def test_time_budget_stops_full_checks(tmp_path: Path) -> None:
    root = tmp_path / "job"
    ckpt = make_dcp(root / "step_1", seed=1)
    with open(ckpt / "big.dat", "wb") as fh:
        fh.truncate(64 << 30)  # sparse: reads of zeros, fast but long
    _manifest(ckpt, {"big.dat": 64 << 30})
    started = time.monotonic()
    verdict = verify_root(root, "full", limits=VerifyLimits(time_budget_s=0.5))
    assert time.monotonic() - started < 10
    assert "big.dat: time budget used up" in verdict.candidates[0].reason
    assert verdict.latest_valid == str(ckpt)


def test_helper_is_killed_at_its_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "job"
    ckpt = make_dcp(root / "step_1", seed=1)
    with open(ckpt / "huge.dat", "wb") as fh:
        fh.truncate(TIB)
    _manifest(ckpt, {"huge.dat": TIB})
    helpers = HelperProcesses(monkeypatch)
    st = root.stat()
    request = HelperRequest(
        op="verify",
        root=str(root),
        level="full",
        owner_uid=st.st_uid,
        owner_gid=st.st_gid,
        max_full_file_bytes=2 * TIB,  # let it try to hash 1 TiB ...
        time_budget_s=3600,  # ... with no budget of its own: only the deadline stops it
    )
    started = time.monotonic()
    verdict = asyncio.run(run_helper(request, timeout_s=3))
    assert time.monotonic() - started < 10
    assert not verdict.verified and "did not finish within 3s" in verdict.note
    helpers.assert_one_ran_and_is_gone()
    # The service goes on: the same root with the default bounds verifies.
    request = request.model_copy(update={"max_full_file_bytes": 1 << 30, "time_budget_s": None})
    assert asyncio.run(run_helper(request, timeout_s=60)).latest_valid == str(ckpt)
