"""A checkpoint a fenced attempt wrote after its fence is never resumed from: the recovery
records the fence (the job attempt it requeues, and when) in the resume hint; the successor's
resume_path passes over such a checkpoint, and the next recovery sets it aside into the
quarantine folder with the reason. Nothing is deleted. Checkpoints the successor writes, and
those the fenced attempt wrote before its fence, are resumed from as always."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from checkpoint.factory import contents, make_dcp, tree_snapshot
from resurrect.checkpoint import HINT_NAME, prepare_resume, resume_path, write_manifest
from resurrect.checkpoint.fenced import Fence, fences_from
from resurrect.checkpoint.manifest import read_writer, writer_from_environment

pytestmark = pytest.mark.torch


def save(root: Path, step: int, job: str, attempt: int, at: float) -> Path:
    """A complete checkpoint of ``step`` saved by job ``job`` attempt ``attempt`` at ``at``."""
    ckpt = make_dcp(root / f"step_{step}", seed=step)
    manifest = write_manifest(ckpt, writer=(job, attempt))
    os.utime(manifest, (at, at))
    return ckpt


def test_the_manifest_names_its_writer_from_the_processes_own_slurm_labels(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "3"}
    assert writer_from_environment(env) == ("77", 3)
    assert writer_from_environment({"SLURM_JOB_ID": "77"}) == ("77", 0)
    assert writer_from_environment({}) is None
    assert writer_from_environment({"SLURM_JOB_ID": "x; rm"}) is None
    ckpt = save(tmp_path, 10, "77", 3, time.time())
    assert read_writer(ckpt) == ("77", 3)


def test_a_fenced_attempts_later_write_is_passed_over_and_then_quarantined(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ckpts"
    now = time.time()
    save(root, 10, "7", 0, now - 60)
    save(root, 20, "7", 0, now - 30)
    # the recovery of attempt 0 verifies and fences it
    verdict = prepare_resume(root, fence=Fence("7", 0, now - 20))
    assert verdict.latest_valid == str(root / "step_20")
    hint = json.loads((root / HINT_NAME).read_text())
    assert fences_from(hint["fences"]) == [Fence("7", 0, now - 20)]
    # attempt 0 lives on, cut off, and saves step 30 after its fence
    save(root, 30, "7", 0, now - 10)
    assert resume_path(root) == root / "step_20"  # what attempt 1 resumes from
    # attempt 1 saves step 40: its own, newer than the hint, resumed from
    save(root, 40, "7", 1, now - 5)
    assert resume_path(root) == root / "step_40"
    # the next recovery (of attempt 1) names it as a fenced write; older than what it
    # resumes from, it stays where it is, and stays passed over (the hint keeps the fence)
    verdict = prepare_resume(root, fence=Fence("7", 1, now))
    assert verdict.latest_valid == str(root / "step_40")
    step_30 = next(c for c in verdict.candidates if c.step == 30)
    assert not step_30.valid and "attempt 0 after that attempt was fenced" in step_30.reason
    assert (root / "step_30").is_dir()
    hint = json.loads((root / HINT_NAME).read_text())
    assert fences_from(hint["fences"]) == [Fence("7", 0, now - 20), Fence("7", 1, now)]


def test_a_newest_fenced_write_is_not_resumed_even_without_a_later_one(tmp_path: Path) -> None:
    """The successor resumes from the hint, not from the newer checkpoint the fenced attempt
    finished meanwhile; a write of another job into the same directory is no fenced write."""
    root = tmp_path / "ckpts"
    now = time.time()
    save(root, 10, "7", 2, now - 60)
    prepare_resume(root, fence=Fence("7", 2, now - 30))
    save(root, 20, "7", 2, now - 1)
    assert resume_path(root) == root / "step_10"
    # the recovery of the successor sets it aside, with the reason, deleting nothing
    # (the hint is resurrect's own file, rewritten: the job's files are what must stay)
    before = contents({k: v for k, v in tree_snapshot(root).items() if k != HINT_NAME})
    verdict = prepare_resume(root, fence=Fence("7", 3, now))
    assert verdict.latest_valid == str(root / "step_10") and not (root / "step_20").exists()
    [moved] = verdict.quarantined
    assert Path(moved).parent == root / ".resurrect-quarantine" and Path(moved).is_dir()
    after = contents(tree_snapshot(root))
    assert all(blob in after for blob in before)  # every byte still there
    assert resume_path(root) == root / "step_10"
    save(root, 30, "8", 0, now)  # a resubmitted job (a new id) writing there is its own
    assert resume_path(root) == root / "step_30"


def test_a_write_before_the_fence_and_one_naming_no_writer_are_left_to_the_other_checks(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ckpts"
    now = time.time()
    save(root, 10, "7", 0, now - 60)
    prepare_resume(root, fence=Fence("7", 0, now - 30))
    save(root, 20, "7", 0, now - 40)  # finished before the fence (a slow, late listing)
    assert resume_path(root) == root / "step_20"
    make_dcp(root / "step_30", seed=30)  # no resurrect manifest: no writer known
    assert resume_path(root) == root / "step_30"


def test_a_hints_malformed_fences_are_skipped() -> None:
    assert fences_from([{"job_id": "7", "attempt": 0, "at": 1.0}, {"job_id": "7; x"}, 3]) == [
        Fence("7", 0, 1.0)
    ]
    assert fences_from({"job_id": "7"}) == []
    assert fences_from([{"job_id": "7", "attempt": True, "at": 1.0}]) == []


@pytest.mark.parametrize(
    "text",
    [
        '{"files": [], "writer": {"job_id": "7", "attempt": 0}}',  # after the file list
        '{"writer": {"job_id": "7x", "attempt": 0}, "files": []}',
        '{"writer": {"job_id": "7", "attempt": -1}, "files": []}',
        '{"writer": {"job_id": "7", "attempt": 99999999999}, "files": []}',
        " " * 8192 + '{"writer": {"job_id": "7", "attempt": 0}, "files": []}',
        "\x00\xff" * 100,
    ],
    ids=["after-files", "bad-id", "negative", "too-long", "past-the-head", "binary"],
)
def test_a_manifest_names_a_writer_only_in_its_head_and_only_in_its_own_shape(
    tmp_path: Path, text: str
) -> None:
    (tmp_path / "resurrect-manifest.json").write_text(text, encoding="latin-1")
    assert read_writer(tmp_path) is None


def test_the_writer_of_a_manifest_of_many_files_is_read_from_its_head(tmp_path: Path) -> None:
    ckpt = tmp_path / "step_10"
    ckpt.mkdir()
    for i in range(200):
        (ckpt / f"shard_{i:04d}.bin").write_bytes(b"x")
    write_manifest(ckpt, writer=("7", 4))
    assert (ckpt / "resurrect-manifest.json").stat().st_size > 4096
    assert read_writer(ckpt) == ("7", 4)


def test_a_save_completed_a_second_before_the_recovery_chose_is_resumed_from(
    tmp_path: Path,
) -> None:
    """A job that dies right after a save: the recovery's own fence (recorded as of its
    request, with the clock-skew allowance after it) never takes that save for a fenced write."""
    from resurrect.checkpoint.helper import HelperRequest

    root = tmp_path / "ckpts"
    now = time.time()
    save(root, 20, "7", 0, now - 30)
    save(root, 40, "7", 0, now - 1)  # the fault came a second after this save completed
    request = HelperRequest(op="prepare", root=str(root), fence_job_id="7", fence_attempt=0)
    prepare_resume(root, fence=request.fence)
    assert resume_path(root) == root / "step_40"
    assert not (root / ".resurrect-quarantine").exists()
