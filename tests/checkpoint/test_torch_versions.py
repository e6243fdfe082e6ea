"""Checkpoints written by every PyTorch minor release from 2.2 on verify without that torch.

Each ``tests/fixtures/checkpoints/torch-VERSION[-pyX.Y.Z]/`` holds a real DCP checkpoint
(``step_1/``, two gloo ranks on CPU) and a real ``torch.save`` file (``step_2.pt``), written
by that release (``deploy/maintenance/torch_matrix.py``). Intact, both are valid and judged;
each kind of damage makes the damaged one invalid, with its reason, and the other is chosen.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from checkpoint.factory import flip_byte_at, globals_named, truncate
from checkpoint.test_damage import DCP_DAMAGE
from resurrect.checkpoint import dcp, verify_root
from resurrect.contracts import CheckpointVerdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
VERSION_DIRS = sorted(FIXTURES.glob("torch-*"), key=lambda p: p.name)
DCP_NAME, SAVE_NAME = "step_1", "step_2.pt"

#: The (module, name) pairs each release's DCP ``.metadata`` names (2 ranks, a DTensor
#: sharded over both, float32/bfloat16/float16/bool tensors, non-tensor items).
_METADATA = "torch.distributed.checkpoint.metadata"
_SHARDED = "torch.distributed._shard.sharded_tensor.metadata"
_DCP_2_3 = frozenset(
    {
        (_METADATA, "Metadata"),
        (_METADATA, "MetadataIndex"),
        (_METADATA, "TensorStorageMetadata"),
        (_METADATA, "TensorProperties"),
        (_METADATA, "ChunkStorageMetadata"),
        (_METADATA, "BytesStorageMetadata"),
        (_METADATA, "_MEM_FORMAT_ENCODING"),  # pickled by value: _MEM_FORMAT_ENCODING(0)
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch.serialization", "_get_layout"),
        ("torch", "Size"),
        ("torch", "float32"),
        ("torch", "bfloat16"),
        ("torch", "float16"),
        ("torch", "bool"),
    }
)
#: 2.2 pickled ShardedTensor's TensorProperties and its enum.
_DCP_2_2 = _DCP_2_3 - {(_METADATA, "TensorProperties"), (_METADATA, "_MEM_FORMAT_ENCODING")} | {
    (_SHARDED, "TensorProperties"),
    (_SHARDED, "MEM_FORMAT_ENCODING"),
}
#: From 2.4 on, ``storage_meta`` holds the checkpoint's path.
_DCP_2_4 = _DCP_2_3 | {(_METADATA, "StorageMeta"), ("pathlib", "PosixPath")}
#: Early Python 3.11 releases (Debian's 3.11.2) pickle the enum as getattr(cls, "NAME").
_BY_NAME = {("builtins", "getattr")}
#: Python 3.13 pickles pathlib's classes from pathlib._local.
_PY_3_13 = _DCP_2_4 - {("pathlib", "PosixPath")} | {("pathlib._local", "PosixPath")}
RECORDED_GLOBALS: dict[str, frozenset[tuple[str, str]]] = {
    "torch-2.2.2": _DCP_2_2,
    "torch-2.2.2-py3.12.1": _DCP_2_2,
    "torch-2.3.1": _DCP_2_3,
    "torch-2.4.1": _DCP_2_4,
    "torch-2.5.1": _DCP_2_4,
    "torch-2.6.0": _DCP_2_4,
    "torch-2.7.1": _DCP_2_4,
    "torch-2.8.0": _DCP_2_4,
    "torch-2.9.1": _DCP_2_4,
    "torch-2.10.0": _DCP_2_4,
    "torch-2.11.0": _DCP_2_4,
    "torch-2.12.1": _DCP_2_4,
    "torch-2.13.0": _DCP_2_4,
    "torch-2.14.1": _DCP_2_4,
    "torch-2.14.1-py3.11.2": _DCP_2_4 | _BY_NAME,
    "torch-2.15.0": _DCP_2_4,
    "torch-2.15.0-py3.12.1": _DCP_2_4,
    "torch-2.15.0-py3.13.0": _PY_3_13,
}


def _dirs(**kwargs: Any) -> Any:
    return pytest.mark.parametrize("version_dir", VERSION_DIRS, ids=lambda p: p.name, **kwargs)


def _root(version_dir: Path, tmp_path: Path) -> Path:
    root = tmp_path / version_dir.name
    shutil.copytree(version_dir, root)
    return root


def _candidate(verdict: CheckpointVerdict, name: str) -> tuple[bool, bool, str]:
    cand = next(c for c in verdict.candidates if Path(c.path).name == name)
    return cand.valid, cand.judged, cand.reason


def test_the_matrix_is_complete() -> None:
    """One fixture for every minor release from 2.2 to 2.15, each saved by two ranks."""
    minors = {".".join(d.name.removeprefix("torch-").split(".")[:2]) for d in VERSION_DIRS}
    assert {f"2.{m}" for m in range(2, 16)} <= minors
    assert set(RECORDED_GLOBALS) == {d.name for d in VERSION_DIRS}
    for version_dir in VERSION_DIRS:
        written = json.loads((version_dir / "written-by.json").read_text())
        assert version_dir.name.removeprefix("torch-").startswith(written["torch"].split("+")[0])
        assert written["dcp_world_size"] == 2, version_dir.name


@_dirs()
def test_the_allow_list_takes_what_each_release_writes(version_dir: Path) -> None:
    data = (version_dir / DCP_NAME / dcp.METADATA_NAME).read_bytes()
    named = globals_named(data, dcp.AllowListRules)
    assert named == RECORDED_GLOBALS[version_dir.name], named ^ RECORDED_GLOBALS[version_dir.name]
    meta = dcp.unpickle_metadata(data)
    dcp.check_structure(meta)
    assert {r.relative_path for r in dcp.storage_refs(meta)} == {"__0_0.distcp", "__1_0.distcp"}
    kinds = {type(e).kind for e in meta.state_dict_metadata.values()}
    assert kinds == {"TensorStorageMetadata", "BytesStorageMetadata"}
    assert meta.state_dict_metadata["model.bias"].properties.state[0] == "torch.bfloat16"


@_dirs()
@pytest.mark.parametrize("level", ["quick", "full"])
def test_intact_checkpoints_of_each_release_are_valid(
    version_dir: Path, tmp_path: Path, level: str
) -> None:
    root = _root(version_dir, tmp_path)
    verdict = verify_root(root, level)  # type: ignore[arg-type]
    assert verdict.verified and verdict.latest_valid == str(root / SAVE_NAME), verdict
    for name in (DCP_NAME, SAVE_NAME):
        valid, judged, reason = _candidate(verdict, name)
        assert valid and judged and reason.startswith("ok: "), (name, reason)
    if level == "full":
        assert "DCP item CRC-32" in _candidate(verdict, DCP_NAME)[2]


def _truncate_metadata(c: Path) -> None:
    truncate(c / dcp.METADATA_NAME)


def _middle_of_largest_member(archive: bytes) -> int:
    """Where in a ``torch.save`` zip the middle of its largest member's data lies."""
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        member = max(zf.infolist(), key=lambda i: i.compress_size)
    header = member.header_offset
    name_len = int.from_bytes(archive[header + 26 : header + 28], "little")
    extra_len = int.from_bytes(archive[header + 28 : header + 30], "little")
    return header + 30 + name_len + extra_len + member.compress_size // 2


def _flip_tensor_byte(c: Path) -> None:
    """Flip one byte in the middle of the largest tensor of the largest DCP item."""
    meta = dcp.load_metadata_safely(c)
    ref = max(dcp.storage_refs(meta), key=lambda r: r.length)
    item = (c / ref.relative_path).read_bytes()[ref.offset : ref.offset + ref.length]
    flip_byte_at(c / ref.relative_path, ref.offset + _middle_of_largest_member(item))


#: test_damage's kinds, and two the fixtures add: (what, apply, reason, levels).
DAMAGE: list[tuple[str, Callable[[Path], None], str, tuple[str, ...]]] = [
    *((what, apply, reason, ("quick", "full")) for what, apply, reason in DCP_DAMAGE),
    ("truncated .metadata", _truncate_metadata, ".metadata garbled", ("quick", "full")),
    ("flipped byte in a shard", _flip_tensor_byte, "CRC", ("full",)),
]


@_dirs()
@pytest.mark.parametrize(
    ("what", "apply", "reason", "level"),
    [(w, a, r, lv) for w, a, r, levels in DAMAGE for lv in levels],
    ids=[f"{w}-{lv}" for w, _a, _r, levels in DAMAGE for lv in levels],
)
def test_each_damage_to_a_dcp_checkpoint_is_caught(
    version_dir: Path,
    tmp_path: Path,
    what: str,
    apply: Callable[[Path], None],
    reason: str,
    level: str,
) -> None:
    root = _root(version_dir, tmp_path)
    (root / SAVE_NAME).rename(root / "step_0.pt")  # the intact fallback is the older one
    apply(root / DCP_NAME)
    verdict = verify_root(root, level)  # type: ignore[arg-type]
    valid, judged, why = _candidate(verdict, DCP_NAME)
    assert not valid and judged and reason in why, (what, why)
    assert verdict.latest_valid == str(root / "step_0.pt")


def _flip_zip_data(path: Path) -> None:
    flip_byte_at(path, _middle_of_largest_member(path.read_bytes()))


SAVE_DAMAGE: list[tuple[str, Callable[[Path], None], str, str]] = [
    ("truncated", lambda p: truncate(p, 0.9), "zip", "quick"),
    ("zero-byte", lambda p: p.write_bytes(b""), "zero-byte", "quick"),
    ("flipped data byte", _flip_zip_data, "CRC", "full"),
]


@_dirs()
@pytest.mark.parametrize(
    ("what", "apply", "reason", "level"), SAVE_DAMAGE, ids=[d[0] for d in SAVE_DAMAGE]
)
def test_each_damage_to_a_torch_save_file_is_caught(
    version_dir: Path,
    tmp_path: Path,
    what: str,
    apply: Callable[[Path], None],
    reason: str,
    level: str,
) -> None:
    root = _root(version_dir, tmp_path)
    apply(root / SAVE_NAME)
    verdict = verify_root(root, level)  # type: ignore[arg-type]
    valid, _judged, why = _candidate(verdict, SAVE_NAME)
    assert not valid and reason in why, (what, why)
    assert verdict.latest_valid == str(root / DCP_NAME)


def test_the_fixtures_verify_where_torch_cannot_be_imported(tmp_path: Path) -> None:
    """Verification needs no torch: every fixture, at full level, with ``import torch``
    failing in the verifying interpreter."""
    roots = [_root(d, tmp_path) for d in VERSION_DIRS]
    code = (
        "import json, sys\n"
        "sys.modules['torch'] = None\n"
        "from resurrect.checkpoint import verify_root\n"
        "print(json.dumps([verify_root(r, 'full').model_dump(mode='json') for r in sys.argv[1:]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, roots)], capture_output=True, text=True, check=True
    )
    for verdict in json.loads(done.stdout):
        assert all(c["valid"] and c["judged"] for c in verdict["candidates"]), verdict
        assert len(verdict["candidates"]) == 2, verdict


def test_unpickling_a_fixture_never_calls_into_torch() -> None:
    """What the allow-list builds is resurrect's own stand-ins, whatever torch is installed."""
    for version_dir in VERSION_DIRS:
        data = (version_dir / DCP_NAME / dcp.METADATA_NAME).read_bytes()
        meta = dcp.unpickle_metadata(data)
        assert isinstance(meta, dcp.Record)
        for entry in meta.state_dict_metadata.values():
            assert type(entry).__module__ == dcp.__name__
