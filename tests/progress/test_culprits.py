"""The follower's memory of hang culprit nodes: windowed, bounded, durable."""

from __future__ import annotations

import json
import os
from pathlib import Path

from resurrect.evidence_trust import HANG_HISTORY_RULE
from resurrect.progress.culprits import MAX_JOBS_PER_NODE, HangCulprits

DAY = 24 * 3600.0


def test_jobs_are_remembered_per_node_within_the_window() -> None:
    culprits = HangCulprits(window_s=DAY)
    culprits.record("gpu-3", "10", now=0.0)
    culprits.record("gpu-3", "11", now=DAY / 2)
    culprits.record("gpu-4", "12", now=DAY / 2)
    assert culprits.jobs("gpu-3", now=DAY / 2) == ["10", "11"]
    assert culprits.jobs("gpu-3", now=DAY + 1) == ["11"]  # job 10's hang is out of the window
    assert culprits.evidence("gpu-9", now=0.0) is None
    evidence = culprits.evidence("gpu-3", now=DAY + 1)
    assert evidence is not None and evidence.rule == HANG_HISTORY_RULE
    assert evidence.fields == {"jobs": "11", "window_s": "86400"} and evidence.host == "gpu-3"


def test_the_memory_is_bounded() -> None:
    culprits = HangCulprits(window_s=DAY)
    for n in range(MAX_JOBS_PER_NODE + 10):
        culprits.record("gpu-1", str(n), now=float(n))
    jobs = culprits.jobs("gpu-1", now=100.0)
    assert len(jobs) == MAX_JOBS_PER_NODE and "0" not in jobs


def test_it_survives_a_restart_in_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "state" / "hang-culprits.json"  # the state directory is made if missing
    HangCulprits(DAY, path).record("gpu-2", "40", now=1000.0)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(path.parent).st_mode & 0o777 == 0o700
    assert HangCulprits(DAY, path).jobs("gpu-2", now=1001.0) == ["40"]


def test_a_bad_file_loses_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "hang-culprits.json"
    for text in ("not json", "[1]", json.dumps({"gpu-1": {"5": "soon"}, "gpu-2": 3})):
        path.write_text(text)
        culprits = HangCulprits(DAY, path)
        assert culprits.jobs("gpu-1", now=0.0) == []
        culprits.record("gpu-1", "6", now=0.0)  # and it is written anew
        assert HangCulprits(DAY, path).jobs("gpu-1", now=1.0) == ["6"]
    (tmp_path / "a-file").write_text("")
    unwritable = HangCulprits(DAY, tmp_path / "a-file" / "x.json")
    unwritable.record("gpu-1", "7", now=0.0)  # logged, kept in memory
    assert unwritable.jobs("gpu-1", now=1.0) == ["7"]
