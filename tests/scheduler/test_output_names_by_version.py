"""Which file a job's output pattern names, on Slurm 22.05, 24.11 and 26.05.

``tests/fixtures/slurm-json/<version>/output-names.jsonl`` was captured on a live cluster of
each version (``capture-output-names.sh``): nine jobs with odd ``sbatch -o`` patterns (a
width of 10**20 digits, every code with and without a width, a backslash, ``%%``, a trailing
``%``, an array task, an array with no ``-o``), each record holding the pattern as squeue
prints it, the file its batch step really wrote, and the paths scontrol's JSON and text
print. resurrect must name the file slurmstepd wrote, on every version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from resurrect.scheduler import slurm_compact as compact
from resurrect.scheduler.slurm_cli import SlurmCli, parse_slurm_version
from resurrect.scheduler.slurm_exec import CommandResult
from resurrect.scheduler.slurm_json import (
    client_expanded_paths_unreliable,
    parse_job,
    stepd_naming,
)

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"
VERSIONS = ("22.05", "24.11", "26.05")
RELEASE = {"22.05": (22, 5, 8), "24.11": (24, 11, 5), "26.05": (26, 5, 5)}


def records(version: str) -> list[dict[str, Any]]:
    lines = (CAPTURES / version / "output-names.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def as_json_job(record: dict[str, Any], standard_output: str, node: str) -> dict[str, Any]:
    """The record as the fields of a job's JSON that name its output."""
    return {
        "job_id": int(record["job_id"]),
        "array_job_id": record["array_job_id"] or 0,
        "array_task_id": record["array_task_id"],
        "name": record["name"],
        "user_name": record["user"],
        "job_state": "COMPLETED",
        "nodes": node,
        "batch_flag": True,
        "current_working_directory": record["work_dir"],
        "standard_output": standard_output,
        "standard_error": "",
    }


def first_node_as_stepd_names_it(version: str, record: dict[str, Any]) -> str:
    """``%N``: the node's name on 26.05; on 22.05 and 24.11 the host's short name, which the
    local cluster (every slurmd on one host) does not share with the node (see below)."""
    return record["nodes"] if version == "26.05" else record["host"]


@pytest.mark.parametrize("version", VERSIONS)
def test_each_pattern_names_the_file_that_versions_slurmstepd_wrote(version: str) -> None:
    naming = stepd_naming(RELEASE[version])
    for record in records(version):
        node = first_node_as_stepd_names_it(version, record)
        task = (
            f"{record['array_job_id']}_{record['array_task_id']}" if record["array_job_id"] else ""
        )
        pattern = compact.output_pattern(
            record["pattern"], job_id=record["job_id"], array_task=task, work_dir=record["work_dir"]
        )
        job = parse_job(as_json_job(record, pattern, node), naming)
        assert job.stdout_path == f"{record['work_dir']}/{record['stepd_file']}", record
        assert job.stderr_path == job.stdout_path


def test_the_versions_name_the_same_pattern_differently() -> None:
    """Version differences, as written by each slurmstepd (job 2 of the capture:
    ``%5j-%3x-%N-%u-%A-%a-%%-%q-%5q-%t-%n-%s-%b.out``; job 5 ``...-%2b-...-%5%-end%``;
    job 6 ``B-%5``): 22.05 has no ``%b``; 24.11 and 26.05 give the array task id modulo 10
    (4294967294 -> 4 for a job that is no array task). 22.05 and 24.11 drop the ``%`` of an
    unknown code with a width (``%5q`` -> ``5q``, ``%5`` at the end -> ``5``) and keep a
    trailing ``%``; 26.05 keeps ``%5q`` and ``%5`` and drops the trailing ``%``. ``%N`` is
    the host's short name on 22.05 and 24.11 (``vm``), the node's name on 26.05."""
    files = {v: [r["stepd_file"] for r in records(v)] for v in VERSIONS}
    assert files["22.05"][1].endswith("-vm-resurrect-demo-21-4294967294-%-%q-5q-0-0-batch-%b.out")
    assert files["24.11"][1].endswith("-vm-resurrect-demo-21-4294967294-%-%q-5q-0-0-batch-4.out")
    assert files["26.05"][1].endswith(
        "-node2-resurrect-demo-21-4294967294-%-%q-%5q-0-0-batch-4.out"
    )
    assert [files[v][4].rsplit("-", 2)[1:] for v in VERSIONS] == [
        ["5%", "end%"],
        ["5%", "end%"],
        ["%5%", "end"],
    ]
    assert [files[v][5] for v in VERSIONS] == ["B-5", "B-5", "B-%5"]


def test_22_05_squeue_prints_a_default_array_output_as_the_jobs_own() -> None:
    """Version difference: for an array task that named no output, 22.05's squeue prints
    ``slurm-<job id>.out`` (not the file, ``slurm-<array id>_<task>.out``); 24.11 and 26.05
    print the pattern ``slurm-%A_%a.out``. Both name the file slurmstepd wrote."""
    printed = {v: records(v)[7]["pattern"].rsplit("/", 1)[-1] for v in VERSIONS}
    assert printed == {
        "22.05": "slurm-27.out",
        "24.11": "slurm-%A_%a.out",
        "26.05": "slurm-%A_%a.out",
    }
    assert {records(v)[7]["stepd_file"] for v in VERSIONS} == {"slurm-27_5.out"}


def test_percent_n_is_the_node_name_for_resurrect_on_every_version() -> None:
    """resurrect expands ``%N`` to the job's first node: where slurmd finds its node by its
    host name (a site's usual setup) that is what every version writes; the local cluster's
    slurmd all run on one host, whose name 22.05 and 24.11 write instead."""
    record = records("24.11")[6]  # C-%A-%a-%j-%b-%J-%N.out, array task 3
    job = parse_job(as_json_job(record, record["pattern"], record["nodes"]), stepd_naming((24, 11)))
    assert job.stdout_path is not None and job.stdout_path.endswith(f"-{record['nodes']}.out")
    assert record["stepd_file"].endswith(f"-{record['host']}.out")


@pytest.mark.parametrize(
    ("version", "field"),
    [
        ("24.11", "json_standard_output"),
        ("26.05", "json_v0.0.42_standard_output"),
        ("24.11", "scontrol_text"),
    ],
)
def test_a_client_expanded_path_is_taken_only_where_it_is_the_file(
    version: str, field: str
) -> None:
    """Version difference: JSON of the v0.0.40-42 data parsers (all of 24.11's, 26.05's
    v0.0.42, which resurrect asks for) prints the path scontrol made of the pattern, not the
    pattern: 24.11's is wrong for a width beyond 10 digits, ``%N %t %n %s %J`` and a
    backslash. Every such path is recognised as unreliable (its pattern is then read with
    squeue); every path taken as it is, is the file slurmstepd wrote."""
    wrong = taken = 0
    for record in records(version):
        printed = record[field]
        stepd_path = f"{record['work_dir']}/{record['stepd_file']}"
        wrong += printed != stepd_path
        if not client_expanded_paths_unreliable(as_json_job(record, printed, record["nodes"])):
            taken += 1
            assert printed == stepd_path, record
    assert taken >= 1
    assert wrong >= 3 if version == "24.11" else wrong == 0  # 26.05's v0.0.42: all right here


def test_26_05_json_holds_the_pattern_beside_the_expanded_path() -> None:
    """Version difference: 26.05's default data parser (v0.0.45, and v0.0.43+) prints the
    pattern as written in ``standard_output`` and scontrol's path in ``stdout_expanded``."""
    for record in records("26.05"):
        assert record["json_standard_output"].endswith(record["pattern"].rsplit("/", 1)[-1])
        job = as_json_job(record, record["json_standard_output"], record["nodes"])
        job["stdout_expanded"] = record["json_stdout_expanded"]
        assert not client_expanded_paths_unreliable(job)


class PatternRunner:
    """Answers ``scontrol show job --json=v0.0.42`` with a 24.11 capture whose running job
    has the output of the capture's first odd job, and its squeue pattern reads."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.calls: list[tuple[str, ...]] = []
        doc = json.loads((CAPTURES / "24.11" / "scontrol-show-job.v0.0.42.json").read_text())
        env = (CAPTURES / "24.11" / "jobs.env").read_text().splitlines()
        self.job_id = dict(line.split("=", 1) for line in env if "=" in line)["RUNNING"]
        for job in doc["jobs"]:
            if str(job["job_id"]) == self.job_id:
                job["standard_output"] = job["standard_error"] = record["json_standard_output"]
                job["current_working_directory"] = record["work_dir"]
        self.doc = json.dumps(doc)
        self.record = record

    async def run(self, argv: Any, *, timeout: float | None = None) -> CommandResult:
        key = tuple(argv)
        self.calls.append(key)
        if key == ("scontrol", "--version"):
            return CommandResult(key, 0, "slurm 24.11.5\n", "")
        if key == ("scontrol", "show", "job", "--json=v0.0.42"):
            return CommandResult(key, 0, self.doc, "")
        if key[:3] == ("squeue", "-h", f"--jobs={self.job_id}") and key[-1] == "STDOUT:0":
            return CommandResult(key, 0, self.record["pattern"] + "\n", "")
        if key[:3] == ("squeue", "-h", f"--jobs={self.job_id}") and key[-1] == "STDERR:0":
            return CommandResult(key, 0, "(null)\n", "")
        raise AssertionError(f"unexpected command {key}")

    async def check(self, argv: Any, *, timeout: float | None = None) -> CommandResult:
        return await self.run(argv, timeout=timeout)


async def test_24_11_full_listing_reads_the_pattern_where_the_json_path_is_wrong() -> None:
    """The live failure on 24.11 (tests/e2e/test_hostile_jobs_on_slurm.py): a job whose
    ``-o`` is ``%99999999999999999999j.out`` is listed with the file slurmstepd wrote
    (``0000000001.out``), not scontrol's ``%99999999999999999...0001.out``; only that job's
    pattern is read with squeue."""
    record = records("24.11")[0]
    assert parse_slurm_version("slurm 24.11.5") == RELEASE["24.11"]
    sched = SlurmCli("test", "/nonexistent/slurm.conf")
    runner = PatternRunner(record)
    sched.runner = runner  # type: ignore[assignment]
    jobs = {job.job_id: job for job in await sched.list_jobs()}
    want = f"{record['work_dir']}/{int(runner.job_id):010d}.out"
    assert jobs[runner.job_id].stdout_path == jobs[runner.job_id].stderr_path == want
    pattern_reads = [c for c in runner.calls if c[0] == "squeue"]
    assert len(pattern_reads) == 2 and all(f"--jobs={runner.job_id}" in c for c in pattern_reads)
