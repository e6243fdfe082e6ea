"""A checkpoint of a PyTorch newer than resurrect knows is not judged, and not damaged.

The installed torch saves a real DCP checkpoint; its metadata is then pickled again with a
class torch does not have (what a future release may add). Resurrect says which names it
does not know and from which DCP format, still checks sizes and CRCs, and lets the job
load the checkpoint; real damage found by those checks still makes it invalid.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint.filesystem as dcp_filesystem
import torch.distributed.checkpoint.metadata as dcp_metadata
from support.checkpoint_attacks import call_pickle
from torch.distributed.checkpoint.filesystem import FileSystemReader

from checkpoint.factory import flip_byte_at, make_dcp, shard_files, truncate
from resurrect.checkpoint import dcp, prepare_resume, verify_root
from resurrect.contracts import CheckpointCandidate, CheckpointVerdict

pytestmark = pytest.mark.torch

FUTURE = "unsupported metadata from a PyTorch resurrect does not know (DCP format version 9.9.0)"


@dataclasses.dataclass
class FutureStorageMetadata:
    """A storage-metadata kind no released torch has."""

    layout: str = "block-sparse"


@dataclasses.dataclass
class FutureStorageInfo:
    """A storage-info kind that pickles its fields as constructor arguments."""

    relative_path: str
    offset: int
    length: int

    def __reduce__(self) -> tuple[Any, ...]:
        return (FutureStorageInfo, (self.relative_path, self.offset, self.length))


@pytest.fixture
def future_classes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make the two classes picklable as if DCP's own modules defined them."""
    for cls, module in (
        (FutureStorageMetadata, dcp_metadata),
        (FutureStorageInfo, dcp_filesystem),
    ):
        monkeypatch.setattr(cls, "__module__", module.__name__)
        monkeypatch.setattr(module, cls.__name__, cls, raising=False)
    yield


def rewrite_as_future(ckpt: Path, *, new_storage_info: bool = False) -> None:
    """Pickle ``ckpt``'s metadata again with a future storage kind and format version."""
    meta = FileSystemReader(str(ckpt)).read_metadata()  # our own trusted save
    meta.state_dict_metadata["step"] = FutureStorageMetadata()
    meta.version = "9.9.0"
    if new_storage_info:
        meta.storage_data = {
            index: FutureStorageInfo(info.relative_path, info.offset, info.length)
            for index, info in meta.storage_data.items()
        }
    (ckpt / dcp.METADATA_NAME).write_bytes(pickle.dumps(meta, protocol=4))


@pytest.fixture
def root(tmp_path: Path, future_classes: None) -> Path:
    """step_1: intact and known; step_2: intact, written by a 'future' PyTorch."""
    root = tmp_path / "ckpts"
    make_dcp(root / "step_1", seed=1)
    make_dcp(root / "step_2", seed=2)
    rewrite_as_future(root / "step_2")
    return root


def _newest(verdict: CheckpointVerdict) -> CheckpointCandidate:
    return verdict.candidates[0]


@pytest.mark.parametrize("level", ["quick", "full"])
def test_future_metadata_is_not_judged_and_is_loaded(root: Path, level: str) -> None:
    verdict = verify_root(root, level)  # type: ignore[arg-type]
    newest = _newest(verdict)
    assert newest.valid and not newest.judged
    assert newest.reason.startswith(f"not judged: {FUTURE}: names "), newest.reason
    assert "torch.distributed.checkpoint.metadata.FutureStorageMetadata" in newest.reason
    assert "garbled" not in newest.reason
    assert "passed: DCP shard sizes" in newest.reason
    assert ("DCP item CRC-32" in newest.reason) == (level == "full")
    assert verdict.latest_valid == str(root / "step_2") and verdict.resume_step == 2
    assert "step_2 is loaded unjudged" in verdict.note
    assert verdict.candidates[1].valid and verdict.candidates[1].judged


def test_without_a_version_field_no_format_is_named(root: Path) -> None:
    meta = FileSystemReader(str(root / "step_2")).read_metadata()
    meta.version = None
    (root / "step_2" / dcp.METADATA_NAME).write_bytes(pickle.dumps(meta, protocol=4))
    reason = _newest(verify_root(root, "quick")).reason
    assert reason.startswith(
        "not judged: unsupported metadata from a PyTorch resurrect does not know: names"
    )


@pytest.mark.parametrize(
    ("damage", "level", "expected"),
    [
        pytest.param(lambda c: truncate(shard_files(c)[0]), "quick", "truncated shard", id="trunc"),
        pytest.param(lambda c: shard_files(c)[0].unlink(), "quick", "missing shard", id="missing"),
        pytest.param(
            lambda c: flip_byte_at(shard_files(c)[0], shard_files(c)[0].stat().st_size // 2),
            "full",
            "@",
            id="flipped-byte",
        ),
        pytest.param(
            lambda c: truncate(c / dcp.METADATA_NAME), "quick", ".metadata garbled", id="meta-cut"
        ),
    ],
)
def test_damage_the_checks_can_see_still_makes_it_invalid(
    root: Path, damage: Any, level: str, expected: str
) -> None:
    damage(root / "step_2")
    verdict = verify_root(root, level)  # type: ignore[arg-type]
    newest = _newest(verdict)
    assert not newest.valid and expected in newest.reason, newest.reason
    assert verdict.latest_valid == str(root / "step_1")


def test_storage_entries_it_cannot_read_leave_the_sizes_unchecked(root: Path) -> None:
    rewrite_as_future(root / "step_2", new_storage_info=True)
    newest = _newest(verify_root(root, "full"))
    assert newest.valid and not newest.judged
    assert "FutureStorageInfo" in newest.reason and "passed" not in newest.reason


def test_prepare_resume_keeps_the_unjudged_checkpoint_in_place(root: Path) -> None:
    before = sorted(p.name for p in (root / "step_2").iterdir())
    verdict = prepare_resume(root, level="full")
    assert verdict.latest_valid == str(root / "step_2") and verdict.quarantined == []
    assert sorted(p.name for p in (root / "step_2").iterdir()) == before


class _Payload:
    """Stands for a call in the crafted file."""


class _SavesAFile(pickle.Pickler):
    """Pickles each :class:`_Payload` as ``torch.save("pwned", marker)``."""

    def __init__(self, file: Any, marker: Path) -> None:
        super().__init__(file, protocol=4)
        self.marker = marker

    def reducer_override(self, obj: object) -> object:
        if isinstance(obj, _Payload):
            return torch.save, ("pwned", str(self.marker))
        return NotImplemented


def test_a_crafted_future_metadata_runs_nothing(root: Path, tmp_path: Path) -> None:
    """Globals of torch modules become inert records in the second reading: what a hostile
    file names there is not called, only reported."""
    marker = tmp_path / "pwned"
    meta = FileSystemReader(str(root / "step_2")).read_metadata()
    meta.state_dict_metadata["step"] = FutureStorageMetadata(layout=_Payload())  # type: ignore[arg-type]
    buffer = io.BytesIO()
    _SavesAFile(buffer, marker).dump(meta)
    (root / "step_2" / dcp.METADATA_NAME).write_bytes(buffer.getvalue())
    newest = _newest(verify_root(root, "full"))
    assert not marker.exists()
    assert not newest.judged and "torch.serialization.save" in newest.reason, newest.reason
    # Control: a plain unpickler (given the future class) would have written the marker.
    code = (
        "import pickle, sys\n"
        "class Plain(pickle.Unpickler):\n"
        "    def find_class(self, module, name):\n"
        "        if name.startswith('Future'): return type(name, (), {})\n"
        "        return super().find_class(module, name)\n"
        "Plain(sys.stdin.buffer).load()\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        input=buffer.getvalue(),
        check=True,
    )
    assert marker.exists()


def test_the_memory_format_enum_by_name_or_by_value() -> None:
    """Python 3.11 pickles an Enum member as getattr(cls, name), 3.12+ as cls(value)."""
    enum = dcp.MemoryFormatEncoding
    assert enum(0) == "TORCH_CONTIGUOUS_FORMAT" and enum(1) == "TORCH_CHANNELS_LAST"
    assert dcp._enum_member(enum, "TORCH_PRESERVE_FORMAT") == "TORCH_PRESERVE_FORMAT"
    for bad in (3, -1, True, "0", 0.0):
        with pytest.raises(pickle.UnpicklingError):
            enum(bad)
    with pytest.raises(pickle.UnpicklingError):
        dcp._enum_member(enum, "__class__")


async def test_a_recovery_is_not_stopped_for_a_checkpoint_it_cannot_judge(root: Path) -> None:
    """The job allows no restart from scratch and its only checkpoint is unjudged: the
    recovery goes on (the job's own loader judges), and says so."""
    import shutil

    from temporalio.testing import ActivityEnvironment

    from resurrect.activities.checkpoint_step import verify_checkpoint
    from resurrect.config import ResurrectConfig
    from resurrect.contracts import JobInfo, JobPolicy, JobState, StepResult
    from resurrect.steps.runtime import StepRuntime, make_activity
    from resurrect.testing.fake_scheduler import FakeScheduler
    from resurrect.testing.steps import make_step_input

    shutil.rmtree(root / "step_1")
    st = root.stat()
    job = JobInfo(
        job_id="42", state=JobState.FAILED, user="alice", user_id=st.st_uid, group_id=st.st_gid
    )
    step_input = make_step_input("recovery.verify_checkpoint", job=job)
    step_input.bundle.policy = JobPolicy(checkpoint_dir=str(root), allow_restart_from_scratch=False)
    runtime = StepRuntime(scheduler=FakeScheduler.with_nodes(1), config=ResurrectConfig())
    activity = make_activity(verify_checkpoint, runtime, activity_name="recovery.verify_checkpoint")
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        start_to_close_timeout=timedelta(seconds=120),
        schedule_to_close_timeout=None,
        started_time=datetime.now(UTC),
    )
    result: StepResult = await env.run(activity, step_input)
    assert not result.stop_recovery and result.outcome is None, result
    verdict = result.checkpoint
    assert verdict is not None and verdict.latest_valid == str(root / "step_2")
    assert not verdict.candidates[0].judged
    assert "loaded unjudged" in result.detail and FUTURE in result.detail


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(call_pickle("torch.nn", "Metadata"), id="Metadata of another torch module"),
        pytest.param(call_pickle("torch", "load", "x"), id="a torch call, no Metadata"),
        pytest.param(call_pickle("os", "system", "true"), id="a global outside torch"),
        pytest.param(
            call_pickle("torch.distributed.checkpoint.metadata", "os.system", "true"), id="dotted"
        ),
    ],
)
def test_only_dcp_metadata_of_torch_modules_is_unsupported_rather_than_garbled(
    data: bytes,
) -> None:
    with pytest.raises(dcp.MetadataError, match=r"^\.metadata garbled \(") as caught:
        dcp.unpickle_metadata(data)
    assert not isinstance(caught.value, dcp.UnsupportedMetadata)
