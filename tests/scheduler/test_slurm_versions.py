"""What Slurm 22.05, 24.11 and 26.05 really print, read by resurrect.

The fixtures under ``tests/fixtures/slurm-json/<version>/`` were captured from live clusters
of each version (``capture.sh``): a running 2-node job with a comment and an AdminComment, a
failed job (exit 3), a held job, a job slurmctld requeued after its node was killed, a node
drained by resurrect, one drained by an operator, the killed node DOWN+NOT_RESPONDING, and an
idle one. Every version's JSON (each data parser it has) and text must give resurrect the same
jobs and nodes; where the versions print differently, a test names the difference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resurrect.contracts import JobInfo, JobState, NodeInfo
from resurrect.scheduler import slurm_compact as compact
from resurrect.scheduler.slurm_cli import DATA_PARSER, json_option, parse_slurm_version
from resurrect.scheduler.slurm_json import (
    SlurmParseError,
    parse_job,
    parse_jobs,
    parse_nodes,
    parse_scontrol_record,
)

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"
VERSIONS = ("22.05", "24.11", "26.05")


def captured(version: str) -> dict[str, str]:
    """The ids and the killed node of that version's capture (jobs.env)."""
    lines = (CAPTURES / version / "jobs.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def job_documents(version: str) -> list[Path]:
    """Every full job listing of the version: 22.05's ``squeue --json``, and on 23.02+
    ``scontrol show job --json`` with the default and every other data parser."""
    folder = CAPTURES / version
    if version == "22.05":
        return [folder / "squeue.json"]
    return [folder / "scontrol-show-job.json", *sorted(folder.glob("scontrol-show-job.v*.json"))]


def node_documents(version: str) -> list[Path]:
    folder = CAPTURES / version
    if version == "22.05":
        return [folder / "sinfo.json"]
    return [folder / "scontrol-show-node.json", *sorted(folder.glob("scontrol-show-node.v*.json"))]


def by_id(jobs: list[JobInfo]) -> dict[str, JobInfo]:
    return {job.job_id: job for job in jobs}


def all_job_documents() -> list[tuple[str, Path]]:
    return [(v, p) for v in VERSIONS for p in job_documents(v)]


def all_node_documents() -> list[tuple[str, Path]]:
    return [(v, p) for v in VERSIONS for p in node_documents(v)]


def check_jobs(version: str, jobs: dict[str, JobInfo]) -> None:
    """The jobs of the capture, as resurrect must read them on every version."""
    ids = captured(version)
    running = jobs[ids["RUNNING"]]
    assert running.state is JobState.RUNNING
    assert running.nodes == ["node1", "node2"] and running.num_nodes == 2
    assert running.comment == "resurrect: enabled"
    assert running.restart_count == 0 and running.requeue_allowed and not running.held
    assert running.stdout_path == f"/tmp/sv-{version}/out/train-{ids['RUNNING']}.out"
    assert running.stderr_path == running.stdout_path
    failed = jobs[ids["FAILED"]]
    assert failed.state is JobState.FAILED and failed.exit_code == 3
    assert failed.exit_signal is None and not failed.requeue_allowed
    held = jobs[ids["HELD"]]
    assert held.state is JobState.PENDING and held.held and held.state_reason == "JobHeldUser"
    requeued = jobs[ids["REQUEUED"]]
    assert requeued.state is JobState.PENDING and not requeued.held
    assert requeued.restart_count == 1 and requeued.nodes == []
    assert requeued.excluded_nodes == ["node1", "node2"]


def check_nodes(version: str, nodes: dict[str, NodeInfo]) -> None:
    down = captured(version)["DOWN_NODE"]
    assert nodes["node1"].drained and nodes["node1"].reason == "resurrect: gpu.hardware inc-1"
    assert nodes["node2"].drained and nodes["node2"].reason == "operator: bad dimm"
    assert nodes[down].state == "DOWN" and "NOT_RESPONDING" in nodes[down].flags
    assert nodes[down].unavailable and nodes[down].reason == "Not responding"
    assert nodes["node4"].state == "IDLE" and not nodes["node4"].flags
    assert not nodes["node4"].unavailable


@pytest.mark.parametrize(("version", "path"), all_job_documents(), ids=lambda x: str(x))
def test_every_versions_job_json_gives_the_same_jobs(version: str, path: Path) -> None:
    jobs = by_id(parse_jobs(json.loads(path.read_text())))
    check_jobs(version, jobs)
    # AdminComment (resurrect's hold mark) is in the JSON of every version
    assert jobs[captured(version)["RUNNING"]].admin_comment == "resurrect-hold: inc-1"
    assert jobs[captured(version)["FAILED"]].admin_comment == ""


@pytest.mark.parametrize(("version", "path"), all_node_documents(), ids=lambda x: str(x))
def test_every_versions_node_json_gives_the_same_nodes(version: str, path: Path) -> None:
    check_nodes(version, {n.name: n for n in parse_nodes(json.loads(path.read_text()))})


@pytest.mark.parametrize("version", VERSIONS)
def test_the_compact_reads_give_what_the_json_gives(version: str) -> None:
    """squeue -O lines plus one owner-written field per command (what the watcher reads)
    give the same jobs as the JSON; sinfo -N -O lines the same nodes."""
    folder = CAPTURES / version
    rows = {
        r.job_id: r for r in compact.parse_job_rows((folder / "squeue-compact.txt").read_text())
    }
    running = captured(version)["RUNNING"]
    owner = {
        field: compact.owner_field_value(field, (folder / f"squeue-owner-{field}.txt").read_text())
        for field in compact.OWNER_FIELDS
    }
    jobs = {
        job_id: parse_job({**row.json_fields(), **(owner if job_id == running else {})})
        for job_id, row in rows.items()
    }
    from_json = by_id(parse_jobs(json.loads(job_documents(version)[0].read_text())))
    for job_id, job in jobs.items():
        seen = from_json[job_id]
        assert (job.state, job.nodes, job.restart_count, job.held, job.exit_code) == (
            seen.state,
            seen.nodes,
            seen.restart_count,
            seen.held,
            seen.exit_code,
        )
    assert jobs[running].comment == "resurrect: enabled"
    assert jobs[running].stdout_path == from_json[running].stdout_path
    assert jobs[running].stderr_path == from_json[running].stderr_path
    nodes = compact.parse_node_lines((folder / "sinfo-compact.txt").read_text())
    check_nodes(version, {n.name: n for n in nodes})


@pytest.mark.parametrize("version", ("22.05", "24.11"))
def test_the_admin_comment_is_in_every_versions_json(version: str) -> None:
    """The hold mark is read from JSON, where Slurm delimits AdminComment (22.05: the whole
    ``squeue --json``, whose filters it ignores); ``scontrol show job -o`` prints it after
    the job name, command and working directory its owner chooses, so its text is never
    read for it (tests/scheduler/test_hold_mark_injection.py)."""
    running = captured(version)["RUNNING"]
    doc = json.loads((CAPTURES / version / "squeue.json").read_text())
    [job] = [j for j in doc["jobs"] if str(j["job_id"]) == running]
    assert job["admin_comment"] == "resurrect-hold: inc-1"
    record = parse_scontrol_record(_job_line(version, running))
    assert record["JobState"] == "RUNNING" and record["Restarts"] == "0"


def test_26_05_text_no_longer_ends_the_admin_comment_with_two_spaces() -> None:
    """Version difference: 22.05 and 24.11 print ``AdminComment=... `` followed by two
    spaces in ``scontrol show job -o``; 26.05 prints one, so the text cannot tell where a
    comment holding spaces ends. resurrect reads AdminComment from JSON on 23.02+."""
    line = _job_line("26.05", captured("26.05")["RUNNING"])
    assert "AdminComment=resurrect-hold: inc-1 Comment=resurrect: enabled StdErr=" in line
    doc = json.loads((CAPTURES / "26.05" / "scontrol-show-job.json").read_text())
    assert by_id(parse_jobs(doc))[captured("26.05")["RUNNING"]].admin_comment == (
        "resurrect-hold: inc-1"
    )


def _job_line(version: str, job_id: str) -> str:
    lines = (CAPTURES / version / "scontrol-show-job.txt").read_text().splitlines()
    return next(line for line in lines if line.startswith(f"JobId={job_id} "))


@pytest.mark.parametrize("version", VERSIONS)
def test_the_data_parser_resurrect_asks_for_is_one_the_version_has(version: str) -> None:
    """24.11 and 26.05 are asked for v0.0.42 by name (24.11's default, 26.05's oldest);
    22.05 has no data parsers (--json prints its v0.0.38 data)."""
    option = json_option(parse_slurm_version(captured(version)["VERSION"]))
    if version == "22.05":
        assert option == "--json"
        return
    assert option == f"--json={DATA_PARSER}"
    docs = [json.loads(p.read_text()) for p in job_documents(version)]
    assert f"data_parser/{DATA_PARSER}" in {d["meta"]["plugin"]["data_parser"] for d in docs}


def test_releases_outside_the_data_parsers_span_get_their_default() -> None:
    assert json_option((23, 2, 7)) == "--json"
    assert json_option((24, 5, 1)) == "--json"
    assert json_option((26, 11, 0)) == "--json"


@pytest.mark.parametrize("version", ("24.11", "26.05"))
def test_sinfo_json_has_no_node_list_since_23(version: str) -> None:
    """Version difference: 22.05's ``sinfo --json`` lists nodes; 24.11 and 26.05 print an
    aggregated ``sinfo`` array instead, so resurrect reads nodes with ``scontrol show node``."""
    doc = json.loads((CAPTURES / version / "sinfo.json").read_text())
    assert "nodes" not in doc and isinstance(doc["sinfo"], list)
    with pytest.raises(SlurmParseError):
        parse_nodes(doc)
    assert "nodes" in json.loads((CAPTURES / "22.05" / "sinfo.json").read_text())


def test_exit_codes_print_differently_and_read_the_same() -> None:
    """Version difference: squeue's exit_code column is the raw wait status on 22.05
    (``768`` for exit 3) and ``code:signal`` on 24.11 and 26.05 (``3:0``)."""
    printed = {}
    for version in VERSIONS:
        text = (CAPTURES / version / "squeue-compact.txt").read_text()
        rows = {r.job_id: r for r in compact.parse_job_rows(text)}
        failed = rows[captured(version)["FAILED"]]
        printed[version] = failed.exit_code
        assert parse_job(failed.json_fields()).exit_code == 3
    assert printed == {"22.05": "768", "24.11": "3:0", "26.05": "3:0"}


def test_an_unset_stderr_prints_differently_and_reads_the_same() -> None:
    """Version difference: squeue -O STDERR of a job without --error prints the stdout
    pattern on 22.05 and ``(null)`` on 24.11 and 26.05; both mean "with stdout"."""
    printed = {
        v: (CAPTURES / v / "squeue-owner-standard_error.txt").read_text().strip() for v in VERSIONS
    }
    assert printed["22.05"].endswith("/out/%x-%j.out")
    assert printed["24.11"] == printed["26.05"] == "(null)"


def test_an_expedited_requeue_reads_as_running_again_elsewhere() -> None:
    """26.05, ``--requeue=expedite``: right after slurmctld requeued the job for a killed
    node it runs again on other nodes with its restart counted (no PENDING phase). Only the
    default data parser (v0.0.45) and the text name the expedited requeue; v0.0.42 does not."""
    folder = CAPTURES / "26.05"
    default = json.loads((folder / "expedited-requeue.json").read_text())
    named = json.loads((folder / "expedited-requeue.v0.0.42.json").read_text())
    for doc in (default, named):
        (job,) = parse_jobs(doc)
        assert job.state is JobState.RUNNING and job.restart_count == 1
        assert job.nodes == ["node3", "node4"] and job.requeue_allowed
    assert "EXPEDITED_REQUEUE" in default["jobs"][0]["flags"]
    assert "EXPEDITED_REQUEUE" not in named["jobs"][0]["flags"]
    assert "ExpeditedRequeue=Yes" in (folder / "expedited-requeue.txt").read_text()
