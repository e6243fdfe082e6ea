"""Parsing of real Slurm 22.05 output and schema-built 24.11 samples into contracts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from resurrect.contracts import JobInfo, JobState, NodeInfo
from resurrect.scheduler.slurm_json import (
    SlurmParseError,
    expand_output_pattern,
    number,
    parse_exit,
    parse_job_state,
    parse_jobs,
    parse_node_state,
    parse_nodes,
    parse_scontrol_record,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"


def load(name: str) -> dict[str, Any]:
    doc = json.loads((FIXTURES / name).read_text())
    assert isinstance(doc, dict)
    return doc


def by_id(jobs: list[JobInfo]) -> dict[str, JobInfo]:
    return {j.job_id: j for j in jobs}


def by_name(nodes: list[NodeInfo]) -> dict[str, NodeInfo]:
    return {n.name: n for n in nodes}


# ---------------------------------------------------------------- 22.05 (captured)
def test_2205_running_job() -> None:
    jobs = by_id(parse_jobs(load("squeue-22.05.json")))
    job = jobs["1"]
    assert job.state is JobState.RUNNING
    assert job.name == "train"
    assert job.user == "resurrect-demo"
    assert job.user_id is not None and job.user_id > 0
    assert job.group_id == 1001  # checkpoint access runs as the owner's uid and group
    assert job.nodes == ["node1", "node2"]
    assert job.num_nodes == 2
    assert job.requeue_allowed is True
    assert job.held is False
    assert job.comment == "resurrect: enabled"
    assert job.stdout_path is not None and job.stdout_path.endswith("/out/train-1.out")
    assert job.stderr_path == job.stdout_path
    assert job.start_time is not None
    assert job.end_time is None  # a running job's end_time is only the expected end
    assert job.exit_code is None


def test_2205_failed_job_exit_code_from_wait_status() -> None:
    job = by_id(parse_jobs(load("squeue-22.05.json")))["2"]
    assert job.state is JobState.FAILED
    assert job.state_reason == "NonZeroExitCode"
    assert (job.exit_code, job.exit_signal) == (3, None)
    assert job.requeue_allowed is False
    assert job.stderr_path is not None and job.stderr_path.endswith("/out/bad-2.err")
    assert job.end_time is not None


def test_2205_signaled_job() -> None:
    job = by_id(parse_jobs(load("squeue-22.05.json")))["4"]
    assert job.state is JobState.FAILED
    assert job.exit_signal == 9


def test_2205_held_and_auto_requeued_jobs() -> None:
    jobs = by_id(parse_jobs(load("squeue-22.05.json")))
    held = jobs["3"]
    assert held.state is JobState.PENDING and held.held and held.state_reason == "JobHeldUser"
    assert held.num_nodes == 3
    lost = jobs["5"]
    assert lost.state is JobState.PENDING
    assert lost.held is False
    assert lost.state_reason == "BeginTime"
    assert lost.restart_count == 1
    assert lost.excluded_nodes == ["node1", "node2"]
    assert lost.nodes == []
    assert lost.start_time is None


def test_2205_nodes() -> None:
    nodes = by_name(parse_nodes(load("sinfo-22.05.json")))
    assert set(nodes) == {"node1", "node2", "node3", "node4"}
    assert nodes["node1"].drained and nodes["node1"].reason.startswith("resurrect:")
    assert nodes["node2"].drained and nodes["node2"].reason == "operator: bad dimm"
    assert nodes["node3"].state == "IDLE" and not nodes["node3"].drained
    assert nodes["node4"].state == "DOWN" and nodes["node4"].unavailable
    assert "NOT_RESPONDING" in nodes["node4"].flags
    assert nodes["node3"].partitions == ["debug"]


# ---------------------------------------------------------------- 24.11 (schema-built)
def test_2411_jobs() -> None:
    jobs = by_id(parse_jobs(load("scontrol-show-job-24.11.json")))
    run = jobs["101"]
    assert run.state is JobState.RUNNING and run.nodes == ["gpu001", "gpu002"]
    assert run.stdout_path == "/home/alice/run/train-llm-101.out"
    assert (run.user_id, run.group_id) == (1001, 1001)
    assert run.exit_code is None and run.end_time is None
    requeued = jobs["102"]
    assert requeued.state is JobState.PENDING and not requeued.held
    assert requeued.restart_count == 2
    assert requeued.excluded_nodes == ["gpu003", "gpu007"]
    assert requeued.stdout_path == "/home/alice/run/slurm-102.out"
    held = jobs["103"]
    assert held.held and held.state_reason == "JobHeldAdmin"
    assert held.stdout_path == "/scratch/alice/103.log"
    assert held.stderr_path == "/scratch/alice/103.err"
    failed = jobs["104"]
    assert failed.state is JobState.FAILED and (failed.exit_code, failed.exit_signal) == (3, None)
    assert not failed.requeue_allowed
    lost = jobs["105"]
    assert lost.state is JobState.NODE_FAIL and lost.exit_signal == 9
    assert lost.stdout_path == "/home/alice/run/out-gpu011-105.txt"
    assert lost.end_time is not None
    assert jobs["106"].state is JobState.COMPLETED


def test_2411_nodes() -> None:
    nodes = by_name(parse_nodes(load("scontrol-show-node-24.11.json")))
    assert nodes["gpu001"].state == "ALLOCATED" and not nodes["gpu001"].drained
    assert nodes["gpu003"].state == "IDLE" and nodes["gpu003"].flags == ["DRAIN"]
    assert nodes["gpu003"].drained
    assert nodes["gpu007"].state == "MIXED" and nodes["gpu007"].drained
    assert nodes["gpu011"].unavailable and nodes["gpu011"].state == "DOWN"
    assert nodes["gpu020"].partitions == ["gpu", "debug"]


# ---------------------------------------------------------------- pieces
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        ({"set": True, "infinite": False, "number": 7}, 7),
        ({"set": False, "infinite": False, "number": 7}, None),
        ({"set": True, "infinite": True, "number": 0}, None),
        (None, None),
        (True, None),
        ("12", 12),
        ("x", None),
    ],
)
def test_number_both_shapes(value: Any, expected: int | None) -> None:
    assert number(value) == expected


@pytest.mark.parametrize(
    ("value", "state", "flags"),
    [
        ("RUNNING", JobState.RUNNING, []),
        (["PENDING", "REQUEUED"], JobState.PENDING, ["REQUEUED"]),
        (["COMPLETING"], JobState.COMPLETING, []),
        (["RUNNING", "COMPLETING"], JobState.RUNNING, ["COMPLETING"]),
        ("SPECIAL_EXIT", JobState.OTHER, ["SPECIAL_EXIT"]),
        ("WEIRD", JobState.OTHER, []),
        (None, JobState.OTHER, []),
    ],
)
def test_parse_job_state(value: Any, state: JobState, flags: list[str]) -> None:
    assert parse_job_state(value) == (state, flags)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, (0, None)),
        (768, (3, None)),
        (9, (0, 9)),
        (None, (None, None)),
        ({"status": ["ERROR"], "return_code": {"set": True, "number": 2}}, (2, None)),
        (
            {
                "status": ["SIGNALED"],
                "return_code": {"set": True, "number": 0},
                "signal": {"id": {"set": True, "number": 11}, "name": "SEGV"},
            },
            (0, 11),
        ),
        ({"status": ["PENDING"], "return_code": {"set": True, "number": 0}}, (None, None)),
    ],
)
def test_parse_exit(value: Any, expected: tuple[int | None, int | None]) -> None:
    assert parse_exit(value) == expected


@pytest.mark.parametrize(
    ("state", "flags", "base", "out_flags"),
    [
        ("idle", ["DRAIN"], "IDLE", ["DRAIN"]),
        ("down*", [], "DOWN", ["NOT_RESPONDING"]),
        ("idle+drain", None, "IDLE", ["DRAIN"]),
        (["MIXED", "DRAIN", "COMPLETING"], None, "MIXED", ["DRAIN", "COMPLETING"]),
        ([], None, "UNKNOWN", []),
    ],
)
def test_parse_node_state(state: Any, flags: Any, base: str, out_flags: list[str]) -> None:
    assert parse_node_state(state, flags) == (base, out_flags)


def test_expand_output_pattern() -> None:
    kw: dict[str, str] = {
        "job_id": "42",
        "name": "train",
        "user": "alice",
        "first_node": "gpu1",
        "work_dir": "/w",
    }
    assert expand_output_pattern("%x-%j.out", **kw) == "/w/train-42.out"
    assert expand_output_pattern("/l/%u/%N_%5j_%%.log", **kw) == "/l/alice/gpu1_00042_%.log"
    # a job that is no array task: %A is its id, %a Slurm's NO_VAL (what slurmstepd writes)
    assert expand_output_pattern("/l/%A_%a.log", **kw) == "/l/42_4294967294.log"
    task = {"array_job_id": "40", "array_task_id": "2"}
    assert expand_output_pattern("/l/%A_%a_%j.log", **kw, **task) == "/l/40_2_42.log"
    assert expand_output_pattern("/l/%q.log", **kw) == "/l/%q.log"


def test_embedded_errors_and_bad_shapes_raise() -> None:
    with pytest.raises(SlurmParseError, match="boom"):
        parse_jobs({"jobs": [], "errors": [{"description": "boom", "error_number": 1}]})
    with pytest.raises(SlurmParseError):
        parse_jobs({"meta": {}})
    with pytest.raises(SlurmParseError):
        parse_nodes({"nodes": [{"state": "idle"}]})
    with pytest.raises(SlurmParseError):
        parse_jobs({"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "n[1-"}]})


def test_scontrol_record_keeps_spaces_in_values() -> None:
    line = (
        "NodeName=node1 Arch=x86_64 State=IDLE+DRAIN Reason=resurrect: gpu.hardware inc-1 "
        "[root@2026-11-29T19:46:00] Comment=(null)"
    )
    rec = parse_scontrol_record(line)
    assert rec["State"] == "IDLE+DRAIN"
    assert rec["Reason"] == "resurrect: gpu.hardware inc-1 [root@2026-11-29T19:46:00]"
    assert rec["Comment"] == "(null)"


def test_requeueheld_job_still_completing_counts_as_held() -> None:
    # squeue --json on 22.05 right after `scontrol requeuehold` of a job on a dead node
    job = {
        "job_id": 9,
        "job_state": "COMPLETING",
        "state_reason": "JobHeldUser",
        "priority": 0,
        "restart_cnt": 1,
        "nodes": "node[3-4]",
    }
    info = parse_jobs({"jobs": [job]})[0]
    assert info.state is JobState.COMPLETING and info.held
    running = parse_jobs({"jobs": [dict(job, job_state="RUNNING")]})[0]
    assert running.held is False
