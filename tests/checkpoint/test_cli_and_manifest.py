"""The ``resurrect checkpoint`` commands, the manifest helper, parallelism and progress."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from checkpoint.factory import make_dcp, shard_files, truncate
from resurrect.checkpoint import MANIFEST_NAME, verify_root, write_manifest
from resurrect.checkpoint.__main__ import main
from resurrect.checkpoint.manifest import read_manifest, sha256_file
from resurrect.contracts import CheckpointVerdict

pytestmark = pytest.mark.torch


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "ckpts"
    for step in (5, 10):
        make_dcp(root / f"step-{step}", seed=step)
    truncate(shard_files(root / "step-10")[0])
    return root


def test_registered_in_the_resurrect_cli() -> None:
    import argparse

    from resurrect.checkpoint.cli import register
    from resurrect.cli import SUBCOMMAND_MODULES

    assert "resurrect.checkpoint.cli" in SUBCOMMAND_MODULES
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["checkpoint", "verify", "/x", "--json", "--level", "full"])
    assert args.handler is not None and args.level == "full" and args.json


def test_verify_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path)
    assert main(["checkpoint", "verify", str(root), "--json", "--level", "full"]) == 0
    verdict = CheckpointVerdict.model_validate_json(capsys.readouterr().out)
    assert verdict.latest_valid == str(root / "step-5")
    assert [(c.step, c.valid) for c in verdict.candidates] == [(10, False), (5, True)]
    assert "truncated shard" in verdict.candidates[0].reason


def test_verify_text_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path)
    assert main(["checkpoint", "verify", str(root)]) == 0
    out = capsys.readouterr().out
    assert "BAD step=10" in out and "resume from: " + str(root / "step-5") in out
    assert main(["checkpoint", "verify", str(tmp_path / "missing"), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["verified"] is False
    (root / "step-5" / ".metadata").unlink()
    assert main(["checkpoint", "verify", str(root), "--json"]) == 1


def test_prepare_resume_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path)
    assert main(["checkpoint", "prepare-resume", str(root), "--json", "--observe"]) == 0
    observed = CheckpointVerdict.model_validate_json(capsys.readouterr().out)
    assert observed.quarantined == [str(root / "step-10")] and (root / "step-10").is_dir()
    assert main(["checkpoint", "prepare-resume", str(root), "--json", "--progress"]) == 0
    captured = capsys.readouterr()
    verdict = CheckpointVerdict.model_validate_json(captured.out)
    assert verdict.latest_valid == str(root / "step-5") and len(verdict.quarantined) == 1
    assert "resume from step-5" in captured.err
    assert not (root / "step-10").exists() and Path(verdict.quarantined[0]).is_dir()


def test_write_manifest(tmp_path: Path) -> None:
    ckpt = make_dcp(tmp_path / "step_1")
    (ckpt / "sub").mkdir()
    (ckpt / "sub" / "extra.bin").write_bytes(b"abc")
    (ckpt / "half.tmp").write_bytes(b"x")
    path = write_manifest(ckpt)
    assert path == ckpt / MANIFEST_NAME
    entries = {e.path: e for e in read_manifest(ckpt)}
    assert set(entries) == {".metadata", "sub/extra.bin", *(p.name for p in shard_files(ckpt))}
    assert entries["sub/extra.bin"].size == 3
    assert entries["sub/extra.bin"].sha256 == sha256_file(ckpt / "sub" / "extra.bin")
    assert not [p for p in os.listdir(ckpt) if p.startswith(f".{MANIFEST_NAME}")]
    # Rewriting is idempotent and atomic (no temporary left behind).
    write_manifest(ckpt)
    assert {e.path for e in read_manifest(ckpt)} == set(entries)


def test_parallel_full_verify_reports_progress(tmp_path: Path) -> None:
    root = tmp_path / "r"
    for step in range(1, 5):
        make_dcp(root / f"ckpt_{step}", seed=step, shards=4)
        write_manifest(root / f"ckpt_{step}")
    lines: list[str] = []
    single = verify_root(root, "full", workers=1)
    parallel = verify_root(root, "full", lines.append, workers=8)
    assert single == parallel
    assert parallel.latest_valid == str(root / "ckpt_4")
    assert lines[0].startswith(str(root)) and "4 checkpoint(s)" in lines[0]
    assert lines[-1].endswith("done, 4/4 intact")


def test_step_naming_and_order(tmp_path: Path) -> None:
    root = tmp_path / "r"
    names = ["iter_0000100", "step_9", "global_step20", "checkpoint-1000", "epoch_3", "ckpt_50"]
    for name in names:
        make_dcp(root / name)
    (root / "notes").mkdir()
    (root / "step_x").mkdir()
    verdict = verify_root(root)
    assert [c.step for c in verdict.candidates] == [1000, 100, 50, 20, 9, 3]
    assert verdict.latest_valid == str(root / "checkpoint-1000")


def test_progress_runs_on_the_calling_thread_and_its_errors_propagate(tmp_path: Path) -> None:
    import threading

    root = tmp_path / "r"
    make_dcp(root / "step_1", shards=3)
    threads: set[int] = set()
    verify_root(root, "full", lambda _line: threads.add(threading.get_ident()), workers=4)
    assert threads == {threading.get_ident()}

    class Cancelled(Exception):
        pass

    def cancelled(line: str) -> None:
        if line.startswith("verified"):
            raise Cancelled(line)

    with pytest.raises(Cancelled):
        verify_root(root, "full", cancelled, workers=4)
