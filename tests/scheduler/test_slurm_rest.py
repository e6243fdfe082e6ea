"""The slurmrestd backend against answers recorded from real slurmrestd of Slurm 24.11 and
26.05 (tests/fixtures/slurm-rest/<version>/, made by tests/support/capture_slurm_rest.py).

The live contract tests are in test_slurm_rest_on_slurm.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import httpx
import pytest

from resurrect.config import ClusterSettings
from resurrect.contracts import JobState
from resurrect.errors import (
    ConfigError,
    JobNotFound,
    NodeNotFound,
    SchedulerError,
    SchedulerRefused,
    SchedulerUnavailable,
)
from resurrect.scheduler import slurm_rest_client
from resurrect.scheduler.factory import register_scheduler, scheduler_for, scheduler_names
from resurrect.scheduler.slurm_exec import CommandRunner
from resurrect.scheduler.slurm_rest import SlurmRest
from resurrect.scheduler.slurm_rest_client import CONNECT_ATTEMPTS, RestClient

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-rest"
VERSIONS = ("24.11", "26.05")
PARSER = {"24.11": "v0.0.42", "26.05": "v0.0.45"}
Handler = Callable[[httpx.Request], httpx.Response]


def recordings(version: str) -> dict[str, dict[str, Any]]:
    """The recorded answers of ``version`` by name."""
    return {
        path.stem: dict(json.loads(path.read_text()), name=path.stem)
        for path in (FIXTURES / version).glob("*.json")
    }


def recorded(version: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The plain answer to each (method, path): of the recordings of one request, the one
    with the shortest name (``jobs``, not ``jobs-controller-down``)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for _name, record in sorted(recordings(version).items(), key=lambda item: -len(item[0])):
        out[(record["method"], record["path"])] = record
    return out


def replay(version: str, seen: list[httpx.Request] | None = None, **named: str) -> Handler:
    """A slurmrestd that answers as the recorded one did; ``named`` answers a (method, path)
    with another recording (``"GET /slurm/v0.0.42/jobs/": "jobs-controller-down"``)."""
    answers = recorded(version)
    by_name = recordings(version)

    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        key = (request.method, request.url.path)
        record = by_name[named[f"{key[0]} {key[1]}"]] if f"{key[0]} {key[1]}" in named else None
        record = record or answers.get(key)
        if record is None:
            return httpx.Response(404, text="Unable find requested URL.")
        return httpx.Response(record["status"], content=record["body"].encode())

    return handle


def token_file(tmp_path: Path, token: str = "header.payload.signature") -> Path:
    path = tmp_path / "token"
    path.write_text(f"SLURM_JWT={token}\n")
    return path


def backend(tmp_path: Path, handler: Handler, **kwargs: Any) -> SlurmRest:
    client_args = {k: kwargs.pop(k) for k in ("max_body_bytes", "timeout") if k in kwargs}
    client = RestClient(
        "unix:/nonexistent/slurmrestd.socket",
        token_file(tmp_path),
        transport=httpx.MockTransport(handler),
        **client_args,
    )
    return SlurmRest("test", client, verify_timeout=1.0, poll_interval=0.01, **kwargs)


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_newest_data_parser_the_server_answers_ping_for_is_used(
    version: str, tmp_path: Path
) -> None:
    seen: list[httpx.Request] = []
    sched = backend(tmp_path, replay(version, seen))
    assert await sched.data_parser() == PARSER[version]
    await sched.list_nodes()
    pings = [r.url.path for r in seen if r.url.path.endswith("/ping/")]
    assert pings[-1] == f"/slurm/{PARSER[version]}/ping/" and len(pings) == len(set(pings))
    assert seen[-1].headers["X-SLURM-USER-TOKEN"] == "header.payload.signature"


@pytest.mark.parametrize("version", VERSIONS)
async def test_jobs_and_nodes_read_as_the_cli_backend_reads_them(
    version: str, tmp_path: Path
) -> None:
    sched = backend(tmp_path, replay(version))
    [job] = await sched.list_jobs()
    assert job.user == "resurrect-demo" and job.user_id is not None
    if version == "24.11":
        assert job.state is JobState.RUNNING and not job.held
    else:  # recorded after its requeue with the Hold flag (POST jobs/requeue)
        assert job.state is JobState.PENDING and job.held and job.restart_count == 1
    assert json.loads(job.comment) == {"resurrect": {"max_restarts": 2}}
    assert job.admin_comment == "resurrect-hold:1:" + "0" * 32  # the hold mark, delimited
    assert job.requeue_allowed and job.num_nodes == 1
    assert await sched.get_job(job.job_id) == job
    nodes = {node.name: node for node in await sched.list_nodes()}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node4"].drained and nodes["node4"].reason == "resurrect: x"
    assert await sched.get_node("node4") == nodes["node4"]
    # the watcher's view comes from the defaults over the full reads
    active = [j.job_id for j in await sched.list_active_jobs()]
    assert active == ([job.job_id] if version == "24.11" else [])  # not a pending one
    total, drained = await sched.drain_census()
    assert total == 4 and [n.name for n in drained] == ["node4"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_unknown_job_and_node_raise_the_cli_backends_errors(
    version: str, tmp_path: Path
) -> None:
    sched = backend(tmp_path, replay(version))
    with pytest.raises(JobNotFound):
        await sched.get_job("99999")  # HTTP 404, "Invalid job id specified"
    with pytest.raises(NodeNotFound):
        await sched.get_node("nosuch")  # HTTP 200 with "Failure to query node"
    with pytest.raises(NodeNotFound):
        await sched._act_drain("nosuch", "x")  # 500 on 24.11, 422 on 26.05
    with pytest.raises(JobNotFound):
        await sched._act_cancel("99999")  # HTTP 200, the error in the job's status


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_controller_that_does_not_answer_is_unavailable(
    version: str, tmp_path: Path
) -> None:
    jobs = f"GET /slurm/{PARSER[version]}/jobs/"
    sched = backend(tmp_path, replay(version, **{jobs: "jobs-controller-down"}))
    with pytest.raises(SchedulerUnavailable, match="Unable to contact slurm controller"):
        await sched.list_jobs()


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_rejected_token_is_read_again_once_then_unavailable(
    version: str, tmp_path: Path
) -> None:
    rejected = recorded(version)[("GET", f"/slurm/{PARSER[version]}/jobs/")]
    bad = json.loads((FIXTURES / version / "jobs-bad-token.json").read_text())
    good = replay(version)
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        token = request.headers["X-SLURM-USER-TOKEN"]
        if request.url.path.endswith("/jobs/"):
            seen.append(token)
            if token != "renewed.token.value":
                return httpx.Response(bad["status"], content=bad["body"].encode())
            return httpx.Response(rejected["status"], content=rejected["body"].encode())
        return good(request)

    sched = backend(tmp_path, handle)
    with pytest.raises(SchedulerUnavailable, match="token rejected") as info:
        await sched.list_jobs()
    assert str(tmp_path / "token") in str(info.value)
    assert len(seen) == 2  # once more after reading the file again
    token_file(tmp_path, "renewed.token.value")  # an operator renews it
    assert len(await sched.list_jobs()) == 1
    assert seen[-1] == "renewed.token.value"


async def test_a_token_file_without_a_token_is_unavailable(tmp_path: Path) -> None:
    sched = backend(tmp_path, replay("26.05"))
    for text in ("", "SLURM_JWT=\n", "two words", "t\u00f6ken"):
        (tmp_path / "token").write_text(text)
        with pytest.raises(SchedulerUnavailable, match="holds no token"):
            await sched.list_nodes()
    (tmp_path / "token").unlink()
    with pytest.raises(SchedulerUnavailable, match="cannot read slurmrestd token"):
        await sched.list_nodes()


async def test_a_restarting_slurmrestd_is_retried_then_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slurm_rest_client, "RETRY_DELAY_S", 0.0)
    good = replay("26.05")
    refusals = {"left": CONNECT_ATTEMPTS - 1}

    def handle(request: httpx.Request) -> httpx.Response:
        if refusals["left"] > 0:
            refusals["left"] -= 1
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return good(request)

    sched = backend(tmp_path, handle)
    assert len(await sched.list_nodes()) == 4  # the last attempt got through
    refusals["left"] = CONNECT_ATTEMPTS
    with pytest.raises(SchedulerUnavailable, match="Connection refused"):
        await sched.list_nodes()


async def test_answers_are_bounded(tmp_path: Path) -> None:
    sched = backend(tmp_path, replay("26.05"), max_body_bytes=4096)
    with pytest.raises(SchedulerError, match="larger than 4096 B"):
        await sched.list_jobs()


async def test_requeue_uses_the_rest_api_where_the_data_parser_has_it(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    sched = backend(tmp_path, replay("26.05", seen))
    await sched._act_requeuehold("6")
    post = seen[-1]
    assert (post.method, post.url.path) == ("POST", "/slurm/v0.0.45/jobs/requeue")
    assert json.loads(post.content) == {"jobs": ["6"], "flags": ["Hold"]}
    with pytest.raises(JobNotFound):
        await backend(
            tmp_path, replay("26.05", **{"POST /slurm/v0.0.45/jobs/requeue": "requeue-unknown"})
        )._act_requeuehold("99999")


async def test_requeue_before_26_05_runs_scontrol_with_the_token(tmp_path: Path) -> None:
    refused = backend(tmp_path, replay("24.11"))
    with pytest.raises(SchedulerRefused, match="no job requeue"):
        await refused._act_requeuehold("6")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scontrol.log"
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$* $SLURM_JWT" >> {log}\n')
    scontrol.chmod(0o755)
    runner = CommandRunner(bin_dir=str(bin_dir))
    sched = backend(tmp_path, replay("24.11"), requeue_runner=runner)
    await sched._act_requeuehold("6")
    assert log.read_text() == "requeuehold 6 header.payload.signature\n"
    assert "SLURM_JWT" not in os.environ


def test_the_backend_is_chosen_by_name_from_the_registry(tmp_path: Path) -> None:
    assert {"auto", "cli", "pyslurm", "slurmrestd"} <= set(scheduler_names())
    settings = ClusterSettings(
        name="c",
        scheduler="slurmrestd",
        slurmrestd_url="http://127.0.0.1:6820",
        slurmrestd_token_file=token_file(tmp_path),
    )
    assert isinstance(scheduler_for(settings), SlurmRest)
    with pytest.raises(ValueError, match="slurmrestd_url and slurmrestd_token_file"):
        ClusterSettings(scheduler="slurmrestd")
    with pytest.raises(ConfigError, match="not a scheduler backend"):
        scheduler_for(ClusterSettings(scheduler="nosuch"))

    def other(cluster: ClusterSettings, key: Any) -> Any:
        return None

    with pytest.raises(ConfigError, match="registered twice"):
        register_scheduler("slurmrestd", other)


def test_an_installed_backend_is_found_by_its_entry_point(tmp_path: Path) -> None:
    """What a Kubernetes backend package would do: one entry point, no change here."""
    group = "resurrect.schedulers"
    plugin = EntryPoint("rest-by-plugin", "resurrect.scheduler.factory:make_rest_scheduler", group)
    broken = EntryPoint("broken-backend", "no_such_module_here:build", group)
    settings = ClusterSettings(
        scheduler="rest-by-plugin",
        slurmrestd_url="http://127.0.0.1:6820",
        slurmrestd_token_file=token_file(tmp_path),
    )
    assert isinstance(scheduler_for(settings, installed=[plugin, broken]), SlurmRest)
    assert "rest-by-plugin" in scheduler_names()
    with pytest.raises(ConfigError, match="failed to import"):
        scheduler_for(ClusterSettings(scheduler="broken-backend"), installed=[plugin, broken])
