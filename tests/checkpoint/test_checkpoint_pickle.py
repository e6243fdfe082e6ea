"""A crafted DCP ``.metadata`` runs no code, at quick or full level, in or out of the helper.

The allow-list is checked against what the installed torch really pickles.
"""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from support.checkpoint_attacks import Victim, hostile_payloads, write_metadata
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save

from checkpoint.factory import globals_named, make_dcp
from resurrect.checkpoint import fsutil, prepare_resume, verify_root
from resurrect.checkpoint.as_owner import run_helper
from resurrect.checkpoint.dcp import (
    ALLOWED_GLOBALS,
    METADATA_NAME,
    MemoryFormatEncoding,
    storage_refs,
    unpickle_metadata,
)
from resurrect.checkpoint.helper import HelperRequest

pytestmark = pytest.mark.torch


def test_allow_list_accepts_what_the_installed_torch_writes(tmp_path: Path) -> None:
    state = {
        "w": torch.randn(3, 4),
        "half": torch.ones(2, dtype=torch.float16),
        "bf": torch.zeros(2, dtype=torch.bfloat16),
        "flags": torch.ones(2, dtype=torch.bool),
        "ids": torch.arange(5),
        "img": torch.randn(1, 2, 3, 4).to(memory_format=torch.channels_last),
        "empty": torch.empty(0),
        "grad": torch.ones(2, requires_grad=True),
        "step": 7,
        "extra": {"lr": 0.1, "names": ["a", "b"]},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save(state, storage_writer=FileSystemWriter(str(tmp_path), thread_count=2))
    data = (tmp_path / METADATA_NAME).read_bytes()
    assert globals_named(data) <= set(ALLOWED_GLOBALS), globals_named(data) - set(ALLOWED_GLOBALS)
    ours = unpickle_metadata(data)
    theirs = FileSystemReader(str(tmp_path)).read_metadata()  # our own trusted checkpoint
    assert sorted((r.relative_path, r.offset, r.length) for r in storage_refs(ours)) == sorted(
        (i.relative_path, i.offset, i.length) for i in theirs.storage_data.values()
    )
    assert set(ours.state_dict_metadata) == set(theirs.state_dict_metadata)
    assert ours.state_dict_metadata["w"].size == (3, 4)
    props = ours.state_dict_metadata["img"].properties.state
    assert props[0] == "torch.float32" and props[3] in MemoryFormatEncoding.MEMBERS
    # ... and the whole checkpoint verifies at full level.
    root = tmp_path.parent / "root"
    root.mkdir()
    tmp_path.rename(root / "step_1")
    verdict = verify_root(root, "full")
    assert verdict.latest_valid == str(root / "step_1"), verdict


def test_the_payloads_are_real(tmp_path: Path) -> None:
    """Control: a plain unpickler (what torch uses) runs the two main payloads."""
    markers = [tmp_path / "m1", tmp_path / "m2"]
    payloads = [
        hostile_payloads(markers[0])["dotted os.system under a DCP module"],
        hostile_payloads(markers[1])["operator.methodcaller via dotted names"],
    ]
    code = "import pickle, sys\nfor p in sys.argv[1:]: pickle.loads(bytes.fromhex(p))"
    subprocess.run([sys.executable, "-c", code, *(p.hex() for p in payloads)], check=True)
    assert all("uid=" in m.read_text() for m in markers)


@pytest.fixture
def job_root(tmp_path: Path) -> Path:
    root = tmp_path / "job" / "ckpts"
    make_dcp(root / "step_1", seed=1)
    make_dcp(root / "step_2", seed=2)
    return root


@pytest.mark.parametrize("level", ["quick", "full"])
def test_hostile_metadata_runs_nothing_and_is_reported(
    job_root: Path, tmp_path: Path, level: str
) -> None:
    victim = Victim.make(tmp_path)
    before = victim.snapshot()
    marker = tmp_path / "pwned"
    for what, payload in hostile_payloads(marker).items():
        write_metadata(job_root / "step_2", payload)
        verdict = verify_root(job_root, level)  # type: ignore[arg-type]
        newest = verdict.candidates[0]
        assert not marker.exists(), what
        assert not newest.valid and ".metadata garbled" in newest.reason, (what, newest.reason)
        assert "disallowed" in newest.reason, (what, newest.reason)
        assert verdict.latest_valid == str(job_root / "step_1"), what
    # prepare (acting) sets the hostile checkpoint aside inside the root, runs nothing.
    verdict = prepare_resume(job_root, level=level)  # type: ignore[arg-type]
    assert not marker.exists()
    assert verdict.latest_valid == str(job_root / "step_1")
    assert all(Path(q).is_relative_to(job_root) for q in verdict.quarantined)
    assert victim.snapshot() == before
    # The service goes on: a good checkpoint saved afterwards verifies.
    make_dcp(job_root / "step_3", seed=3)
    assert verify_root(job_root, level).latest_valid == str(job_root / "step_3")  # type: ignore[arg-type]


def test_hostile_metadata_in_the_helper_process(job_root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    write_metadata(
        job_root / "step_2", hostile_payloads(marker)["dotted os.system under a DCP module"]
    )
    # tmp_path belongs to the user running the tests; the helper runs as that owner.
    st = job_root.stat()
    request = HelperRequest(
        op="prepare",
        root=str(job_root),
        level="full",
        act=True,
        owner_uid=st.st_uid,
        owner_gid=st.st_gid,
    )
    verdict = asyncio.run(run_helper(request, timeout_s=60))
    assert not marker.exists()
    assert verdict.verified and verdict.latest_valid == str(job_root / "step_1")
    bad = verdict.candidates[0]
    assert not bad.valid and "disallowed dotted global" in bad.reason


def test_swap_between_reads_changes_nothing(
    job_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metadata is read once; swapping the file right after that read reaches no
    second reader (torch's plain pickle.load used to re-read it at full level)."""
    marker = tmp_path / "pwned"
    meta = job_root / "step_2" / METADATA_NAME
    reads: list[Path] = []
    real = fsutil.read_capped

    def read_then_swap(path: Path, cap: int) -> bytes:
        data = real(path, cap)
        reads.append(path)
        if path == meta:
            meta.write_bytes(hostile_payloads(marker)["os.system"])  # the swap
        return data

    monkeypatch.setattr("resurrect.checkpoint.dcp.read_capped", read_then_swap)
    verdict = verify_root(job_root, "full")
    assert reads.count(meta) == 1
    assert not marker.exists()
    # The verdict is about the bytes that were checked (the good ones).
    assert verdict.latest_valid == str(job_root / "step_2")
    monkeypatch.undo()
    # The next verification sees the swapped-in payload, refuses it, and runs nothing.
    verdict = verify_root(job_root, "full")
    assert not marker.exists() and verdict.latest_valid == str(job_root / "step_1")


def test_shared_structure_bomb_is_reported_quickly(job_root: Path) -> None:
    """A .metadata of a few hundred bytes whose shared references describe 2**60 objects:
    nothing is expanded (no repr, no walk), the verdict comes at once."""
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex

    nested: list[object] = []
    for _ in range(60):
        nested = [nested, nested]
    meta = Metadata(state_dict_metadata={}, storage_data={MetadataIndex("x"): nested})
    data = pickle.dumps(meta, protocol=4)
    assert len(data) < 2000
    write_metadata(job_root / "step_2", data)
    started = time.monotonic()
    verdict = verify_root(job_root, "full")
    assert time.monotonic() - started < 10
    assert "malformed storage entry" in verdict.candidates[0].reason
    assert verdict.latest_valid == str(job_root / "step_1")
