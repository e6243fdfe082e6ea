"""Compact, filtered Slurm reads: they mean what the JSON reads mean, owner-written text is
never split out of a shared line, and the watcher's view costs what runs, not what queues."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from support.slurm_text import SlurmText, job_row_line

from resurrect.contracts import JobState
from resurrect.scheduler import slurm_compact as compact
from resurrect.scheduler.slurm_cli import BULK_OWNER_READ, SlurmCli
from resurrect.scheduler.slurm_exec import CommandResult, CommandRunner
from resurrect.scheduler.slurm_json import parse_job, parse_jobs, parse_nodes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"
JOBS_22 = json.loads((FIXTURES / "squeue-22.05.json").read_text())
JOBS_24 = json.loads((FIXTURES / "scontrol-show-job-24.11.json").read_text())
NODES_22 = json.loads((FIXTURES / "sinfo-22.05.json").read_text())
NODES_24 = json.loads((FIXTURES / "scontrol-show-node-24.11.json").read_text())


class TextRunner(CommandRunner):
    """Plays Slurm's clients from JSON records; records every argv."""

    def __init__(self, slurm: SlurmText, version: str) -> None:
        super().__init__()
        self.slurm = slurm
        self.version = version
        self.calls: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        key = tuple(argv)
        self.calls.append(key)
        if key == ("scontrol", "--version"):
            return CommandResult(key, 0, self.version, "")
        answer = self.slurm.answer(key)
        assert answer is not None, f"unexpected command {key}"
        return CommandResult(key, *answer)


def cli(jobs: list[dict[str, Any]], nodes: list[dict[str, Any]], major: int = 22) -> SlurmCli:
    sched = SlurmCli("test", "/nonexistent/slurm.conf")
    version = "slurm 22.05.8" if major == 22 else "slurm 24.11.5"
    sched.runner = TextRunner(SlurmText(jobs, nodes, major=major), version)
    return sched


def calls(sched: SlurmCli) -> list[tuple[str, ...]]:
    runner = sched.runner
    assert isinstance(runner, TextRunner)
    return runner.calls


@pytest.mark.parametrize(("doc", "major"), [(JOBS_22, 22), (JOBS_24, 24)])
async def test_a_job_read_by_id_is_the_job_the_json_shows(doc: dict[str, Any], major: int) -> None:
    sched = cli(doc["jobs"], [], major)
    for expected in parse_jobs(doc):
        if major < 23:  # no squeue column for it: read on its own, only where needed
            assert await sched.read_admin_comment(expected.job_id) == expected.admin_comment
            expected = expected.model_copy(update={"admin_comment": None})
        assert await sched.get_job(expected.job_id) == expected


@pytest.mark.parametrize(("doc", "major"), [(NODES_22, 22), (NODES_24, 24)])
async def test_a_node_read_by_name_is_the_node_the_json_shows(
    doc: dict[str, Any], major: int
) -> None:
    sched = cli([], doc["nodes"], major)
    for expected in parse_nodes(doc):
        node = await sched.get_node(expected.name)
        assert (node.name, node.state, node.drained, node.unavailable, node.reason) == (
            expected.name,
            expected.state,
            expected.drained,
            expected.unavailable,
            expected.reason,
        )


def running(job_id: int, comment: str, **extra: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "job_id": job_id,
        "job_state": "RUNNING",
        "name": "train",
        "user_name": "alice",
        "user_id": 1001,
        "group_id": 1001,
        "partition": "gpu",
        "nodes": "gpu[001-002]",
        "node_count": 2,
        "restart_cnt": 0,
        "priority": 100,
        "comment": comment,
        "standard_output": "/home/alice/out-%j.log",
        "current_working_directory": "/home/alice",
        "start_time": 1795981300,
    }
    job.update(extra)
    return job


def pending(job_id: int) -> dict[str, Any]:
    return running(
        job_id, "", job_state="PENDING", nodes="", priority=0, state_reason="JobHeldUser"
    )


async def test_a_comment_forging_records_stays_one_comment() -> None:
    forged = job_row_line(running(777, '{"resurrect": {}}', user_id=0, user_name="root"))
    hostile = running(5, '{"resurrect": {}}\n' + forged + "\n" + forged, name="a|b\nc")
    sched = cli([hostile, running(6, "")], [])
    jobs = {j.job_id: j for j in await sched.list_active_jobs()}
    assert set(jobs) == {"5", "6"}
    assert jobs["5"].comment == hostile["comment"]
    assert jobs["5"].name == "a|b\nc"
    assert jobs["5"].stdout_path == "/home/alice/out-5.log"


async def test_the_active_view_skips_the_queue_and_reads_owner_fields_once_per_attempt() -> None:
    jobs = [running(1, '{"resurrect": {}}'), *(pending(i) for i in range(100, 400))]
    sched = cli(jobs, [])
    first = await sched.list_active_jobs()
    assert [j.job_id for j in first] == ["1"]
    assert all(not any("--json" in a for a in c) for c in calls(sched))
    owner_reads = len([c for c in calls(sched) if "--jobs=1" in c])
    assert owner_reads == len(compact.OWNER_FIELDS)  # one per field; the row was in view
    calls(sched).clear()
    await sched.list_active_jobs()
    assert len(calls(sched)) == 1  # one filtered query, nothing per job

    jobs[0].update(restart_cnt=1)  # a new attempt: its fields are read again
    await sched.list_active_jobs()
    assert any("--jobs=1" in c for c in calls(sched))


async def test_a_job_that_left_the_view_is_asked_for_by_id() -> None:
    jobs = [running(1, "c"), pending(2)]
    sched = cli(jobs, [])
    await sched.list_active_jobs()
    jobs[0].update(job_state="PENDING", restart_cnt=1, state_reason="BeginTime", nodes="")
    again = await sched.list_active_jobs(also=["1"])
    assert [(j.job_id, j.state, j.restart_count) for j in again] == [("1", JobState.PENDING, 1)]
    assert await sched.list_active_jobs(also=["999"]) == []  # forgotten by slurmctld


async def test_many_unknown_jobs_are_read_with_one_full_read() -> None:
    jobs = [running(i, "c") for i in range(1, BULK_OWNER_READ + 10)]
    sched = cli(jobs, [])
    assert len(await sched.list_active_jobs()) == len(jobs)
    assert sum(1 for c in calls(sched) if c[:2] == ("squeue", "--json")) == 1
    assert not [c for c in calls(sched) if any(a.startswith("--jobs=") for a in c)]


async def test_only_unhealthy_nodes_are_listed() -> None:
    nodes = [
        {"name": "a1", "state": "idle", "partitions": ["p", "q"]},
        {"name": "a2", "state": "down", "reason": "gone | really", "partitions": ["p", "q"]},
        {"name": "a3", "state": "idle", "state_flags": ["NOT_RESPONDING"], "partitions": ["p"]},
        {"name": "a4", "state": "allocated", "state_flags": ["DRAIN"], "partitions": ["p"]},
    ]
    sched = cli([], nodes)
    found = {n.name: n for n in await sched.list_unhealthy_nodes()}
    assert set(found) == {"a2", "a3"}
    assert found["a2"].partitions == ["p", "q"]
    assert found["a2"].reason == "gone | really"
    assert all(n.unavailable for n in found.values())


def test_a_line_of_another_shape_is_left_out_not_guessed() -> None:
    good = job_row_line(running(1, ""))
    text = "\n".join([good, "2|RUNNING|", good.replace("RUNNING", "SLEEPING"), "", "x" * 9000])
    assert [r.job_id for r in compact.parse_job_rows(text)] == ["1"]


def test_a_job_printed_twice_is_trusted_in_neither_line() -> None:
    line = job_row_line(running(1, ""))
    assert compact.parse_job_rows(f"{line}\n{line}\n{line}\n") == []


def test_exit_codes_and_times_read_like_the_json() -> None:
    row = compact.parse_job_row(
        job_row_line(running(3, "", job_state="FAILED", exit_code=2 << 8, end_time=1795981400))
    )
    assert row.json_fields()["exit_code"] == 2 << 8
    assert row.end_time == 1795981400
    signalled = compact.parse_job_row(job_row_line(running(4, "", exit_code=9)))
    assert signalled.json_fields()["exit_code"] == 9
    line = job_row_line(running(5, "")).replace("|100|1|1||", "|100|1|1|3:0|")
    assert compact.parse_job_row(line).json_fields()["exit_code"] == 3 << 8


def test_a_requeue_still_torn_down_is_told_from_an_attempt_that_ended() -> None:
    """squeue 22.05 during a requeue's teardown: COMPLETING, RestartCnt 1, EndTime NONE (the
    requeue clears it); an attempt that ended by itself keeps its end time."""
    requeued = running(6, "", job_state="COMPLETING", restart_cnt=1, end_time=0)
    tearing_down = parse_job(compact.parse_job_row(job_row_line(requeued)).json_fields())
    assert tearing_down.requeued_while_completing and tearing_down.attempt_on_nodes == 0
    ended = running(7, "", job_state="COMPLETING", restart_cnt=1, end_time=1795981400)
    finished = parse_job(compact.parse_job_row(job_row_line(ended)).json_fields())
    assert not finished.requeued_while_completing and finished.attempt_on_nodes == 1


def test_owner_field_output_is_one_value() -> None:
    assert compact.owner_field_value("comment", "(null)\n") == ""
    assert compact.owner_field_value("comment", "a\nb|c\n") == "a\nb|c"
    assert compact.owner_field_value("excluded_nodes", "n[1-2]\n") == "n[1-2]"


def test_json_fixtures_are_not_mutated() -> None:
    before = copy.deepcopy(JOBS_22)
    SlurmText(JOBS_22["jobs"], []).answer(["squeue", "-h", "-O", "x", "--states=RUNNING"])
    assert before == JOBS_22


async def test_nodes_by_name_and_the_drain_census_read_like_the_json() -> None:
    nodes = [
        {"name": "a1", "state": "idle", "partitions": ["p", "q"]},
        {"name": "a2", "state": "idle", "state_flags": ["DRAIN"], "reason": "resurrect: x y"},
        {"name": "a3", "state": "allocated", "state_flags": ["DRAIN"], "reason": "operator"},
        {"name": "a4", "state": "down", "reason": "gone"},
    ]
    sched = cli([], nodes)
    named = await sched.list_nodes_named(["a2", "a4", "zz"])
    assert [(n.name, n.drained, n.unavailable) for n in named] == [
        ("a2", True, False),
        ("a4", False, True),
    ]
    total, drained = await sched.drain_census()
    assert total == 4
    assert sorted((n.name, n.reason) for n in drained) == [
        ("a2", "resurrect: x y"),
        ("a3", "operator"),
    ]
    assert not [c for c in calls(sched) if "--json" in c]
