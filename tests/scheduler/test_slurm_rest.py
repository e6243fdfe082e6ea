"""The slurmrestd backend against answers recorded from real slurmrestd of Slurm 24.11 and
26.05 (tests/fixtures/slurm-rest/<version>/, made by tests/support/capture_slurm_rest.py).

The live contract tests are in test_slurm_rest_on_slurm.py."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.slurm_rest_synthetic import SyntheticRestd

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
from resurrect.scheduler import slurm_rest, slurm_rest_client
from resurrect.scheduler.base import SchedulerBase
from resurrect.scheduler.factory import register_scheduler, scheduler_for, scheduler_names
from resurrect.scheduler.slurm_exec import CommandRunner
from resurrect.scheduler.slurm_json import SlurmParseError
from resurrect.scheduler.slurm_rest import SlurmRest, parse_job_states
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
    path.chmod(0o600)
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
    # the watcher's view: job states, then the jobs in view
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


#: (the read, its recorded answer while slurmctld is down, what the error says, the call)
CONTROLLER_DOWN: list[tuple[str, str, str, Callable[[Any], Awaitable[object]]]] = [
    (
        "jobs/",
        "jobs-controller-down",
        "Unable to contact slurm controller",
        lambda s: s.list_jobs(),
    ),
    (
        "jobs/state/",
        "jobs-state-controller-down",
        "HTTP 500: Unable to query job states",
        lambda s: s.list_active_jobs(),
    ),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("path", "answer", "says", "call"), CONTROLLER_DOWN, ids=[d[0] for d in CONTROLLER_DOWN]
)
async def test_a_controller_that_does_not_answer_is_unavailable(
    version: str,
    tmp_path: Path,
    path: str,
    answer: str,
    says: str,
    call: Callable[[Any], Awaitable[object]],
) -> None:
    read = f"GET /slurm/{PARSER[version]}/{path}"
    sched = backend(tmp_path, replay(version, **{read: answer}))
    with pytest.raises(SchedulerUnavailable, match=says):
        await call(sched)


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


# ---------------------------------------------------------------------- the watcher's view
def paths(seen: list[httpx.Request]) -> list[str]:
    """The requests after the data-parser choice, as ``path?query``."""
    out = [str(r.url.raw_path.decode()) for r in seen]
    return [p.split("/", 3)[3] for p in out if not p.endswith("/ping/")]


def synthetic(tmp_path: Path, restd: SyntheticRestd) -> SlurmRest:
    return backend(tmp_path, restd.handle)


def dumps(items: list[Any]) -> list[dict[str, Any]]:
    return [item.model_dump() for item in items]


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_view_reads_job_states_then_the_jobs_in_view_by_id(
    version: str, tmp_path: Path
) -> None:
    seen: list[httpx.Request] = []
    sched = backend(tmp_path, replay(version, seen))
    [job] = await sched.list_jobs()
    seen.clear()
    active = await sched.list_active_jobs()
    if version == "24.11":  # running: read by id
        assert paths(seen) == ["jobs/state/", f"job/{job.job_id}"] and active == [job]
    else:  # pending (held after its requeue): only its state is read
        assert paths(seen) == ["jobs/state/"] and active == []
    seen.clear()
    assert await sched.list_active_jobs(also=[job.job_id, "99999"]) == [job]
    assert sorted(paths(seen)) == sorted(["job/99999", f"job/{job.job_id}", "jobs/state/"])
    assert await SchedulerBase.list_active_jobs(sched, also=[job.job_id, "99999"]) == [job]


async def test_a_queue_of_held_jobs_is_never_read_whole(tmp_path: Path) -> None:
    restd = SyntheticRestd(jobs=3000, running=20, failed=3, nodes=100)
    sched = synthetic(tmp_path, restd)
    active = await sched.list_active_jobs()
    assert {job.job_id for job in active} == {str(1000 + i) for i in range(23)}
    assert restd.requests == {"ping/": 1, "jobs/state/": 1, "job/": 23}
    assert dumps(active) == dumps(await SchedulerBase.list_active_jobs(sched))


async def test_a_job_gone_between_the_two_reads_is_left_out(tmp_path: Path) -> None:
    restd = SyntheticRestd(jobs=10, running=3, failed=0, nodes=10)

    def handle(request: httpx.Request) -> httpx.Response:
        answer = restd.handle(request)
        if request.url.path.endswith("/jobs/state/"):
            del restd.jobs["1001"]  # ends and is forgotten (MinJobAge) meanwhile
        return answer

    active = await backend(tmp_path, handle).list_active_jobs()
    assert sorted(job.job_id for job in active) == ["1000", "1002"]


async def test_one_full_read_where_most_jobs_are_in_view(tmp_path: Path) -> None:
    restd = SyntheticRestd(jobs=200, running=150, failed=0, nodes=200)
    sched = synthetic(tmp_path, restd)
    assert len(await sched.list_active_jobs()) == 150
    assert restd.requests == {"ping/": 1, "jobs/state/": 1, "jobs/": 1}


def test_job_state_entries_without_a_job_id_are_left_out() -> None:
    doc = {
        "jobs": [
            {"job_id": "7", "state": ["RUNNING"]},
            {"state": ["FAILED"]},
            "not an entry",
            {"job_id": True, "state": ["FAILED"]},
            {"job_id": "8_3", "state": ["PENDING", "REQUEUED"]},
            {"job_id": 9, "state": "NO_SUCH_STATE"},
            {"job_id": "10", "state": [{"odd": "part"}]},
        ]
    }
    assert parse_job_states(doc) == [
        ("7", JobState.RUNNING),
        ("8_3", JobState.PENDING),
        ("9", JobState.OTHER),
        ("10", JobState.OTHER),
    ]
    with pytest.raises(SlurmParseError):
        parse_job_states({"jobs": None})


async def test_a_job_in_view_with_an_invalid_id_is_left_out_not_requested(
    tmp_path: Path,
) -> None:
    seen: list[httpx.Request] = []
    good = replay("24.11", seen)
    states = {"jobs": [{"job_id": "7/../../nodes", "state": ["RUNNING"]}]}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/jobs/state/"):
            return httpx.Response(200, json=states)
        return good(request)

    assert await backend(tmp_path, handle).list_active_jobs() == []
    assert paths(seen) == []


async def test_nodes_are_read_again_only_when_slurmctld_says_they_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    restd = SyntheticRestd(jobs=10, running=2, nodes=50, down_every=20)
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return restd.handle(request)

    sched = backend(tmp_path, handle)
    unhealthy = await sched.list_unhealthy_nodes()
    assert [node.name for node in unhealthy] == ["gpu00020", "gpu00040"]
    total, drained = await sched.drain_census()
    assert total == 50 and [node.name for node in drained] == ["gpu00050"]
    full_total, full_drained = await SchedulerBase.drain_census(sched)
    assert (total, dumps(drained)) == (full_total, dumps(full_drained))
    seen.clear()
    assert await sched.list_unhealthy_nodes() == unhealthy  # HTTP 304: the snapshot
    [request] = seen
    assert request.url.params.get("update_time") and restd.requests["nodes/"] == 4
    restd.set_node("gpu00001", ["DOWN", "NOT_RESPONDING"], "Not responding")
    again = await sched.list_unhealthy_nodes()  # changed: every node again
    assert [node.name for node in again] == ["gpu00001", "gpu00020", "gpu00040"]
    monkeypatch.setattr(slurm_rest, "NODE_RESYNC_S", 0.0)
    seen.clear()
    assert await sched.list_unhealthy_nodes() == again
    assert "update_time" not in seen[0].url.params  # read whole, whatever changed


async def test_the_recorded_304_keeps_the_node_snapshot(tmp_path: Path) -> None:
    unchanged = recordings("26.05")["nodes-unchanged"]
    assert unchanged["status"] == 304 and unchanged["body"] == ""
    good = replay("26.05")
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if "update_time" in request.url.params:
            return httpx.Response(unchanged["status"], content=unchanged["body"].encode())
        return good(request)

    sched = backend(tmp_path, handle)
    first = await sched.drain_census()
    assert await sched.drain_census() == first
    assert "update_time" in seen[-1].url.params


async def test_on_24_11_every_node_view_reads_every_node(tmp_path: Path) -> None:
    """24.11's slurmrestd answers an unchanged ``update_time`` with HTTP 500."""
    assert recordings("24.11")["nodes-unchanged"]["status"] == 500
    seen: list[httpx.Request] = []
    sched = backend(tmp_path, replay("24.11", seen))
    await sched.list_unhealthy_nodes()
    await sched.list_unhealthy_nodes()
    assert paths(seen) == ["nodes/", "nodes/"]


async def test_named_nodes_are_read_by_name(tmp_path: Path) -> None:
    restd = SyntheticRestd(jobs=10, running=2, nodes=60, down_every=20)
    sched = synthetic(tmp_path, restd)
    named = await sched.list_nodes_named(["gpu00002", "gpu00020", "nosuch"])
    assert [node.name for node in named] == ["gpu00002", "gpu00020"]
    # the unknown name is looked up in the node snapshot (read once)
    assert restd.requests == {"ping/": 1, "node/": 3, "nodes/": 1}
    many = [f"gpu{i:05d}" for i in range(1, slurm_rest.NAMED_NODE_READS + 2)]
    assert [node.name for node in await sched.list_nodes_named(many)] == many
    assert restd.requests["node/"] == 3  # more than NAMED_NODE_READS: the snapshot
    reference = await SchedulerBase.list_nodes_named(sched, many)
    assert dumps(await sched.list_nodes_named(many)) == dumps(reference)
