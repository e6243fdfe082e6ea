"""SlurmCli without a cluster: argv construction, error mapping, check-before-act logic."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from support.slurm_text import SlurmText

from resurrect.errors import (
    JobAlreadyPending,
    JobCompleting,
    JobNotFound,
    NodeNotFound,
    SchedulerError,
    SchedulerRefused,
    SchedulerUnavailable,
)
from resurrect.scheduler import Scheduler
from resurrect.scheduler.slurm_cli import SlurmCli, parse_slurm_version
from resurrect.scheduler.slurm_exec import CommandResult, CommandRunner, classify_failure

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"


class FakeRunner(CommandRunner):
    """Answers from a table keyed by the argv after the program path; records every argv.

    Compact reads (``squeue -h ...``, ``sinfo -h -N ...``, ``scontrol show job --json ID``)
    not in the table are rendered from the table's JSON answers by
    :class:`~support.slurm_text.SlurmText`; a list of ``sinfo --json`` answers
    moves on at each node read, as it does for the JSON reads."""

    def __init__(self, answers: dict[tuple[str, ...], list[CommandResult] | CommandResult]) -> None:
        super().__init__()
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        key = tuple(argv)
        self.calls.append(key)
        answer = self.answers.get(key)
        if answer is None:
            return self._render(key)
        if isinstance(answer, list):
            return answer.pop(0) if len(answer) > 1 else answer[0]
        return answer

    def _json_answer(self, keys: list[tuple[str, ...]], *, advance: bool) -> str | None:
        for key in keys:
            answer = self.answers.get(key)
            if isinstance(answer, list):
                answer = answer.pop(0) if advance and len(answer) > 1 else answer[0]
            if answer is not None:
                return answer.stdout
        return None

    def _render(self, key: tuple[str, ...]) -> CommandResult:
        version = self.answers[("scontrol", "--version")]
        assert isinstance(version, CommandResult)
        major = parse_slurm_version(version.stdout)[0]
        node_read = key[:3] == ("sinfo", "-h", "-N")
        jobs = self._json_answer(
            [("squeue", "--json"), ("scontrol", "show", "job", "--json")], advance=False
        )
        nodes = self._json_answer(
            [("sinfo", "--json"), ("scontrol", "show", "node", "--json")], advance=node_read
        )
        text = SlurmText(
            json.loads(jobs)["jobs"] if jobs else [],
            json.loads(nodes)["nodes"] if nodes else [],
            major=major,
        ).answer(key)
        if text is None:
            return CommandResult(key, 0, "", "")
        return CommandResult(key, *text)


def ok(argv: tuple[str, ...], stdout: str = "") -> CommandResult:
    return CommandResult(argv, 0, stdout, "")


def fail(argv: tuple[str, ...], stderr: str, rc: int = 1) -> CommandResult:
    return CommandResult(argv, rc, "", stderr)


def sinfo_doc(state: str, flags: list[str], reason: str) -> str:
    node = {
        "name": "node1",
        "state": state,
        "state_flags": flags,
        "reason": reason,
        "partitions": ["debug"],
    }
    return json.dumps({"meta": {}, "errors": [], "nodes": [node]})


def cli(answers: dict[tuple[str, ...], Any]) -> tuple[SlurmCli, FakeRunner]:
    sched = SlurmCli("test", "/nonexistent/slurm.conf", verify_timeout=1.0, poll_interval=0.01)
    runner = FakeRunner(
        {("scontrol", "--version"): ok(("scontrol", "--version"), "slurm 22.05.8\n"), **answers}
    )
    sched.runner = runner
    return sched, runner


def test_is_a_scheduler() -> None:
    assert isinstance(SlurmCli("c"), Scheduler)
    assert SlurmCli("c").cluster_name == "c"


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("slurm 22.05.8", (22, 5, 8)),
        ("slurm-wlm 24.11.5\n", (24, 11, 5)),
        ("slurm 23.02", (23, 2, 0)),
    ],
)
def test_parse_version(text: str, version: tuple[int, int, int]) -> None:
    assert parse_slurm_version(text) == version


@pytest.mark.parametrize(
    ("stderr", "error"),
    [
        (
            "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
            SchedulerUnavailable,
        ),
        ("scontrol: error: Connection refused", SchedulerUnavailable),
        ("Socket timed out on send/recv operation", SchedulerUnavailable),
        ("slurm_load_jobs error: Invalid job id specified", JobNotFound),
        ("slurm_update error: Invalid node name specified", NodeNotFound),
        ("Node nodeX not found", NodeNotFound),
        ("Requested operation is presently disabled for job 2", SchedulerRefused),
        ("scontrol: error: Job has already finished", SchedulerRefused),
        ("Access/permission denied", SchedulerRefused),
        ("scontrol: error: Job is pending execution", JobAlreadyPending),
        ("slurm_requeue error: Job is still completing", JobCompleting),
        ("Job/step already completing or completed", JobCompleting),
        ("something nobody expected", SchedulerError),
    ],
)
def test_error_mapping(stderr: str, error: type[SchedulerError]) -> None:
    exc = classify_failure(fail(("scontrol", "x"), stderr))
    assert type(exc) is error


async def test_one_job_is_read_by_id_never_the_whole_queue() -> None:
    squeue = (FIXTURES / "squeue-22.05.json").read_text()
    sched, runner = cli({("squeue", "--json"): ok(("squeue", "--json"), squeue)})
    job = await sched.get_job("5")
    assert job.restart_count == 1
    with pytest.raises(JobNotFound):
        await sched.get_job("999")
    assert ("squeue", "--json") not in runner.calls
    assert all("--jobs=5" in c or "--jobs=999" in c for c in runner.calls if c[0] == "squeue")

    job_doc = (FIXTURES / "scontrol-show-job-24.11.json").read_text()
    node_doc = (FIXTURES / "scontrol-show-node-24.11.json").read_text()
    sched2, runner2 = cli(
        {
            ("scontrol", "--version"): ok(("scontrol", "--version"), "slurm 24.11.5"),
            ("scontrol", "show", "job", "--json"): ok((), job_doc),
            ("scontrol", "show", "node", "--json"): ok((), node_doc),
        }
    )
    assert (await sched2.get_job("102")).excluded_nodes == ["gpu003", "gpu007"]
    # 24.11 is asked for the data parser resurrect reads (v0.0.42) by name
    assert ("scontrol", "show", "job", "--json=v0.0.42", "102") in runner2.calls
    assert (await sched2.get_node("gpu003")).drained
    with pytest.raises(NodeNotFound):
        await sched2.get_node("gpu999")
    assert not [c for c in runner2.calls if c[:3] == ("scontrol", "show", "node")]


async def test_full_reads_use_json_of_the_version() -> None:
    squeue = (FIXTURES / "squeue-22.05.json").read_text()
    sched, runner = cli({("squeue", "--json"): ok(("squeue", "--json"), squeue)})
    assert {j.job_id for j in await sched.list_jobs()} >= {"5"}
    assert ("squeue", "--json") in runner.calls


async def test_controller_down_is_unavailable() -> None:
    err = fail(("squeue", "--json"), "slurm_load_jobs error: Unable to contact slurm controller")
    sched, _ = cli({("squeue", "--json"): err})
    with pytest.raises(SchedulerUnavailable):
        await sched.list_jobs()


async def test_invalid_json_is_a_scheduler_error() -> None:
    sched, _ = cli({("sinfo", "--json"): ok((), "not json")})
    with pytest.raises(SchedulerError, match="invalid JSON"):
        await sched.list_nodes()


async def test_drain_reason_is_one_sanitized_argv_element() -> None:
    before = ok((), sinfo_doc("idle", [], ""))
    after = ok((), sinfo_doc("idle", ["DRAIN"], "resurrect: x"))
    sched, runner = cli({("sinfo", "--json"): [before, after]})
    result = await sched.drain_node("node1", "xid 79\nState=RESUME; rm -rf / `id`")
    assert result.changed is True
    update = [c for c in runner.calls if c[:2] == ("scontrol", "update")]
    assert len(update) == 1
    assert update[0][:4] == ("scontrol", "update", "NodeName=node1", "State=DRAIN")
    assert len(update[0]) == 5
    reason = update[0][4]
    assert reason.startswith("Reason=resurrect: xid 79 State=RESUME_ rm -rf / _id_")
    assert "\n" not in reason


async def test_drain_rejects_bad_node_name_before_running_anything() -> None:
    sched, runner = cli({})
    with pytest.raises(SchedulerError):
        await sched.drain_node("node1 State=RESUME", "x")
    assert runner.calls == []


async def test_drain_of_operator_drained_node_keeps_their_reason() -> None:
    doc = ok((), sinfo_doc("idle", ["DRAIN"], "operator: bad dimm"))
    sched, runner = cli({("sinfo", "--json"): doc})
    result = await sched.drain_node("node1", "gpu")
    assert result.changed is False and "someone else" in result.detail
    assert not [c for c in runner.calls if c[:2] == ("scontrol", "update")]


async def test_resume_refuses_operator_drain() -> None:
    sched, runner = cli({("sinfo", "--json"): ok((), sinfo_doc("idle", ["DRAIN"], "operator: x"))})
    with pytest.raises(SchedulerRefused):
        await sched.resume_node("node1")
    assert not [c for c in runner.calls if c[:2] == ("scontrol", "update")]


async def test_verification_timeout_raises() -> None:
    doc = ok((), sinfo_doc("idle", [], ""))
    sched, _ = cli({("sinfo", "--json"): doc})
    with pytest.raises(SchedulerError, match="timed out waiting"):
        await sched.drain_node("node1", "gpu")


async def test_no_requeue_job_is_refused() -> None:
    squeue = (FIXTURES / "squeue-22.05.json").read_text()
    sched, runner = cli({("squeue", "--json"): ok((), squeue)})
    with pytest.raises(SchedulerRefused, match="no-requeue"):
        await sched.requeue_excluding("2", ["node3"])
    assert not [c for c in runner.calls if c[0] == "scontrol" and c[1] not in ("--version", "show")]


async def test_requeue_of_unknown_node_is_refused_before_holding() -> None:
    squeue = (FIXTURES / "squeue-22.05.json").read_text()
    sinfo = (FIXTURES / "sinfo-22.05.json").read_text()
    sched, runner = cli({("squeue", "--json"): ok((), squeue), ("sinfo", "--json"): ok((), sinfo)})
    with pytest.raises(NodeNotFound):
        await sched.requeue_excluding("1", ["node99"])
    mutations = {("scontrol", "hold"), ("scontrol", "requeuehold")}
    assert not [c for c in runner.calls if c[:2] in mutations]


async def test_requeue_already_pending_with_exclusion_is_unchanged() -> None:
    squeue = (FIXTURES / "squeue-22.05.json").read_text()
    sinfo = (FIXTURES / "sinfo-22.05.json").read_text()
    sched, runner = cli({("squeue", "--json"): ok((), squeue), ("sinfo", "--json"): ok((), sinfo)})
    result = await sched.requeue_excluding("5", ["node2"])
    assert result.changed is False
    reads = {"--version", "show"}  # the version and the job's AdminComment (hold mark)
    assert not [c for c in runner.calls if c[0] == "scontrol" and c[1] not in reads]


async def test_runner_timeout_is_unavailable(tmp_path: Path) -> None:
    slow = tmp_path / "squeue"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    runner = CommandRunner(bin_dir=str(tmp_path), timeout=0.3)
    with pytest.raises(SchedulerUnavailable, match="timed out"):
        await runner.run(["squeue", "--json"])


async def test_runner_passes_slurm_conf_and_strips_job_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_dump = tmp_path / "scontrol"
    env_dump.write_text("#!/bin/sh\nenv\n")
    env_dump.chmod(0o755)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    runner = CommandRunner(bin_dir=str(tmp_path), slurm_conf="/x/slurm.conf")
    out = (await runner.check(["scontrol", "arg with space"])).stdout
    assert "SLURM_CONF=/x/slurm.conf" in out
    assert "SLURM_JOB_ID" not in out
    assert os.environ["SLURM_JOB_ID"] == "77"


async def test_runner_rejects_shell_strings_and_missing_programs(tmp_path: Path) -> None:
    runner = CommandRunner(bin_dir=str(tmp_path))
    with pytest.raises(TypeError):
        await runner.run("scontrol show job")
    with pytest.raises(SchedulerError, match="not found"):
        await runner.run(["scontrol"])


async def test_json_errors_with_controller_down_are_unavailable() -> None:
    # what Slurm 22.05 really prints (exit 0) when slurmctld is stopped
    doc = json.dumps(
        {
            "meta": {},
            "errors": [
                {
                    "description": "Failed while looking for jobs",
                    "error_number": -1,
                    "error": "Unspecified error",
                    "source": "slurm_load_jobs",
                }
            ],
            "jobs": [],
        }
    )
    ping_down = CommandResult(("scontrol", "ping"), 1, "Slurmctld(primary) at vm is DOWN\n", "")
    sched, _ = cli({("squeue", "--json"): ok((), doc), ("scontrol", "ping"): ping_down})
    with pytest.raises(SchedulerUnavailable, match="DOWN"):
        await sched.list_jobs()
    ping_up = ok(("scontrol", "ping"), "Slurmctld(primary) at vm is UP\n")
    sched2, _ = cli({("squeue", "--json"): ok((), doc), ("scontrol", "ping"): ping_up})
    with pytest.raises(SchedulerError, match="Failed while looking for jobs") as info:
        await sched2.list_jobs()
    assert not isinstance(info.value, SchedulerUnavailable)


@pytest.mark.parametrize("version", ["24.11", "26.05"])
async def test_an_empty_answer_without_slurmctld_is_unavailable_not_no_jobs(version: str) -> None:
    """24.11 and 26.05: ``scontrol show job --json`` exits 0 with no jobs, no errors and
    ``last_update`` 0 when slurmctld is down (captured); that is no answer, never "no jobs"."""
    doc = (FIXTURES / version / "scontrol-show-job.controller-down.json").read_text()
    assert json.loads(doc)["jobs"] == [] and json.loads(doc)["errors"] == []
    ping_down = CommandResult(("scontrol", "ping"), 1, "Slurmctld(primary) at vm is DOWN\n", "")
    sched, _ = cli(
        {
            ("scontrol", "--version"): ok((), f"slurm-wlm {version}.5\n"),
            ("scontrol", "show", "job", "--json=v0.0.42"): ok((), doc),
            ("scontrol", "ping"): ping_down,
        }
    )
    with pytest.raises(SchedulerUnavailable, match="DOWN"):
        await sched.list_jobs()
