"""The follower's memory of hang culprit nodes: windowed, bounded, durable, the job's nodes only."""

from __future__ import annotations

import json
import os
from pathlib import Path

from resurrect.evidence_trust import HANG_HISTORY_RULE
from resurrect.progress.hang_culprits import MAX_JOBS_PER_NODE, MAX_NODES_PER_JOB, HangCulprits

DAY = 24 * 3600.0
NODES = [f"gpu-{n}" for n in range(1, 10)]


def test_jobs_are_remembered_per_node_within_the_window() -> None:
    culprits = HangCulprits(window_s=DAY)
    culprits.record("gpu-3", "10", now=0.0, job_nodes=NODES)
    culprits.record("gpu-3", "11", now=DAY / 2, job_nodes=NODES)
    culprits.record("gpu-4", "12", now=DAY / 2, job_nodes=NODES)
    assert culprits.jobs("gpu-3", now=DAY / 2) == ["10", "11"]
    assert culprits.jobs("gpu-3", now=DAY + 1) == ["11"]  # job 10's hang is out of the window
    assert culprits.evidence("gpu-9", now=0.0) is None
    evidence = culprits.evidence("gpu-3", now=DAY + 1)
    assert evidence is not None and evidence.rule == HANG_HISTORY_RULE
    assert evidence.fields == {"jobs": "11", "window_s": "86400"} and evidence.host == "gpu-3"


def test_only_the_jobs_own_nodes_are_recorded_under_slurms_spelling() -> None:
    culprits = HangCulprits(window_s=DAY)
    assert culprits.record("GPU-3.cluster", "10", 0.0, job_nodes=["gpu-3"]) == ("gpu-3", "")
    node, note = culprits.record("gpu-77", "10", 0.0, job_nodes=["gpu-3"])
    assert node is None and "not one of the job's nodes" in note
    evidence, notes = culprits.implicate("11", ["gpu-3", "x" * 300], ["gpu-3", "gpu-4"], 1.0)
    assert [e.host for e in evidence] == ["gpu-3"] and evidence[0].fields["jobs"] == "10,11"
    assert len(notes) == 1 and len(notes[0]) < 200  # the invented name is cut short
    assert notes[0].startswith("1 hang culprit name(s) not recorded")


def test_the_memory_is_bounded() -> None:
    culprits = HangCulprits(window_s=DAY)
    for n in range(MAX_JOBS_PER_NODE + 10):
        culprits.record("gpu-1", str(n), now=float(n), job_nodes=NODES)
    jobs = culprits.jobs("gpu-1", now=100.0)
    assert len(jobs) == MAX_JOBS_PER_NODE and "0" not in jobs
    big_job = [f"n{i}" for i in range(MAX_NODES_PER_JOB + 20)]
    for node in big_job:
        culprits.record(node, "5000", now=200.0, job_nodes=big_job)
    remembered = [node for node in big_job if culprits.jobs(node, 201.0)]
    assert len(remembered) == MAX_NODES_PER_JOB and "n0" not in remembered
    assert len(culprits.jobs("gpu-1", now=201.0)) == MAX_JOBS_PER_NODE  # others' untouched


def test_it_survives_a_restart_in_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "state" / "hang-culprits.json"  # the state directory is made if missing
    HangCulprits(DAY, path).record("gpu-2", "40", now=1000.0, job_nodes=NODES)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(path.parent).st_mode & 0o777 == 0o700
    again = HangCulprits(DAY, path)
    assert again.jobs("gpu-2", now=1001.0) == ["40"]
    again.record("gpu-2", "41", now=1002.0, job_nodes=NODES)  # appended: one line more
    assert len(path.read_text().splitlines()) == 2
    assert HangCulprits(DAY, path).jobs("gpu-2", now=1003.0) == ["40", "41"]


def test_a_bad_file_loses_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "hang-culprits.json"
    for text in ("not json", "[1]", json.dumps({"gpu-1": {"5": "soon"}, "gpu-2": 3})):
        path.write_text(text)
        culprits = HangCulprits(DAY, path)
        assert culprits.jobs("gpu-1", now=0.0) == []
        culprits.record("gpu-1", "6", now=0.0, job_nodes=NODES)  # and it is written anew
        assert HangCulprits(DAY, path).jobs("gpu-1", now=1.0) == ["6"]
    (tmp_path / "a-file").write_text("")
    unwritable = HangCulprits(DAY, tmp_path / "a-file" / "x.json")
    unwritable.record("gpu-1", "7", now=0.0, job_nodes=NODES)  # logged, kept in memory
    assert unwritable.jobs("gpu-1", now=1.0) == ["7"]
