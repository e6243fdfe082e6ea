"""One job's record can cost only that record: number syntax in job-controlled text is
ASCII, and any failure while reading one job's record leaves that job out with a note,
in every reader of job lists on both backends (CLI JSON, CLI compact, slurmrestd) and in
the watcher that polls them."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.slurm_rest_synthetic import SyntheticRestd

from resurrect.config import ResurrectConfig
from resurrect.contracts import Interruption, JobState
from resurrect.numbers import ascii_int, is_ascii_digits
from resurrect.scheduler import slurm_json
from resurrect.scheduler.slurm_json import expand_output_pattern, number, parse_jobs
from resurrect.scheduler.slurm_rest import SlurmRest
from resurrect.scheduler.slurm_rest_client import RestClient
from resurrect.sensors.slurm_watcher import SlurmWatcher
from tests.scheduler.test_slurm_compact import cli, running

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"
OPT_IN = json.dumps({"resurrect": {}})
# Characters str.isdigit() (or isdecimal/isnumeric) accepts that are no ASCII digit: some
# int() takes (Arabic-Indic, fullwidth, mathematical), some it refuses (superscripts,
# circled digits), and number shapes int() takes that Slurm never prints (space, "_", "+").
NON_ASCII_DIGITS = ["²", "¹⁰", "٣", "\uff11\uff12", "\U0001d7d9", "①", "߁", "⑽", "½", "\u216b"]
NOT_SLURM_NUMBERS = [*NON_ASCII_DIGITS, " 12", "1_0", "+3", "12\n", "0x10", "", "-"]


def hostile_patterns() -> list[str]:
    out = []
    for digits in NON_ASCII_DIGITS:
        out += [f"/tmp/o-%{digits}j.log", f"o-%0{digits}A_%{digits}a", f"%{digits}"]
    return out


@pytest.mark.parametrize("text", NOT_SLURM_NUMBERS)
def test_number_syntax_is_ascii(text: str) -> None:
    assert not is_ascii_digits(text.lstrip("-"))
    assert ascii_int(text, signed=True) is None
    assert number(text) is None


def test_ascii_numbers_read_as_numbers() -> None:
    assert ascii_int("0042") == 42 and ascii_int("-7", signed=True) == -7
    assert ascii_int("-7") is None and ascii_int("1" * 30, max_digits=20) is None
    assert number("12") == 12 and number("-3") == -3


@pytest.mark.parametrize("pattern", hostile_patterns())
@pytest.mark.parametrize("version", [(22, 5), (24, 11), (26, 5)])
def test_a_non_ascii_pad_width_is_no_width(pattern: str, version: tuple[int, int]) -> None:
    """slurmstepd reads a width of ASCII digits (C isdigit on bytes): anything else is an
    unknown code, left as that release leaves it; never an exception."""
    path = expand_output_pattern(
        pattern,
        job_id="77",
        name="n",
        user="u",
        first_node="gpu1",
        work_dir="/w",
        array_job_id="70",
        array_task_id="7",
        naming=slurm_json.stepd_naming(version),
    )
    assert path.startswith("/")
    assert all(char in path for char in pattern if not char.isascii())  # never a width


def two_jobs(doc: dict[str, Any], hostile: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its first job twice: the first changed by ``hostile``, the second
    (another user's) as recorded, under another id."""
    doc = copy.deepcopy(doc)
    first = doc["jobs"][0]
    other = copy.deepcopy(first)
    other["job_id"] = 424242
    first.update(hostile)
    doc["jobs"] = [first, other]
    return doc


JOB_DOCS = [
    path
    for path in sorted(FIXTURES.glob("*/s*-job*.json")) + sorted(FIXTURES.glob("*/squeue.json"))
    if json.loads(path.read_text()).get("jobs")  # a controller-down recording has none
]


@pytest.mark.parametrize("path", JOB_DOCS, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("pattern", ["/tmp/o-%²j.log", "%٣j", "x-%①a"])
def test_a_hostile_pattern_in_any_versions_json_costs_no_other_job(
    path: Path, pattern: str
) -> None:
    doc = json.loads(path.read_text())
    jobs = parse_jobs(two_jobs(doc, {"standard_output": pattern, "standard_error": pattern}))
    assert "424242" in {job.job_id for job in jobs}


@pytest.mark.parametrize(
    "failure", [ValueError("x"), RuntimeError("x"), KeyError("x"), OverflowError(), TypeError()]
)
def test_any_exception_in_one_record_costs_that_record_alone(
    failure: Exception, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    doc = two_jobs(json.loads((FIXTURES / "squeue-22.05.json").read_text()), {"job_id": 666})
    real = slurm_json._outputs

    def outputs(job: dict[str, Any], *args: Any) -> Any:
        if job.get("job_id") == 666:
            raise failure
        return real(job, *args)

    monkeypatch.setattr(slurm_json, "_outputs", outputs)
    with caplog.at_level(logging.WARNING):
        assert [job.job_id for job in parse_jobs(doc)] == ["424242"]
    assert any("666" in r.getMessage() and "left out" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------ the CLI backend
@pytest.mark.parametrize("pattern", hostile_patterns()[:6])
async def test_the_compact_view_keeps_every_other_job(pattern: str) -> None:
    hostile = running(5, OPT_IN, standard_output=pattern, standard_error=pattern)
    sched = cli([hostile, running(6, OPT_IN, job_state="FAILED")], [])
    jobs = {job.job_id: job for job in await sched.list_active_jobs()}
    assert jobs["6"].state is JobState.FAILED


async def test_the_cli_json_list_keeps_every_other_job() -> None:
    hostile = running(5, OPT_IN, standard_output="%²j")
    sched = cli([hostile, running(6, OPT_IN, job_state="FAILED")], [], major=24)
    assert "6" in {job.job_id for job in await sched.list_jobs()}


async def test_one_failing_owner_read_costs_that_job_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sched = cli([running(5, OPT_IN), running(6, OPT_IN, job_state="FAILED")], [])
    real = sched._read_owner_fields

    async def read(row: Any) -> Any:
        if row.job_id == "5":
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "odd bytes")
        return await real(row)

    monkeypatch.setattr(sched, "_read_owner_fields", read)
    assert [job.job_id for job in await sched.list_active_jobs()] == ["6"]


# ------------------------------------------------------------------ the slurmrestd backend
def rest(tmp_path: Path, restd: SyntheticRestd) -> SlurmRest:
    token = tmp_path / "token"
    token.write_text("SLURM_JWT=header.payload.signature\n")
    token.chmod(0o600)
    client = RestClient(
        "unix:/nonexistent/slurmrestd.socket", token, transport=httpx.MockTransport(restd.handle)
    )
    return SlurmRest("test", client, verify_timeout=1.0, poll_interval=0.01)


@pytest.mark.parametrize("field", ["standard_output", "standard_error"])
@pytest.mark.parametrize("pattern", hostile_patterns()[:6])
async def test_the_rest_view_keeps_every_other_job(
    tmp_path: Path, field: str, pattern: str
) -> None:
    restd = SyntheticRestd(jobs=6, running=3, failed=2, nodes=4)
    restd.jobs["1001"][field] = pattern
    restd.jobs["1001"].pop("stdout_expanded", None)
    sched = rest(tmp_path, restd)
    active = {job.job_id for job in await sched.list_active_jobs()}
    assert {"1000", "1002", "1003", "1004"} <= active
    assert {"1000", "1002"} <= {job.job_id for job in await sched.list_jobs()}


async def test_a_rest_job_record_that_is_no_job_costs_that_job_alone(tmp_path: Path) -> None:
    restd = SyntheticRestd(jobs=5, running=3, failed=1, nodes=4)
    restd.jobs["1001"]["nodes"] = "gpu[1-"  # no hostlist: the only job of its answer
    restd.jobs["1002"]["job_id"] = "٣"
    active = {job.job_id for job in await rest(tmp_path, restd).list_active_jobs()}
    assert {"1000", "1003"} <= active and not active & {"1001", "3"}


# ------------------------------------------------------------------ the watcher
class Reports(list[Interruption]):
    async def __call__(self, interruption: Interruption) -> str:
        self.append(interruption)
        return interruption.workflow_id


async def test_the_watcher_reports_another_users_failure_beside_the_hostile_job(
    tmp_path: Path,
) -> None:
    config = ResurrectConfig.model_validate({"cluster": {"name": "c1"}})
    restd = SyntheticRestd(jobs=4, running=2, failed=1, nodes=4)
    for job in restd.jobs.values():
        job["comment"] = OPT_IN
    restd.jobs["1000"]["standard_output"] = "/tmp/o-%²j.log"
    reports = Reports()
    watcher = SlurmWatcher(rest(tmp_path, restd), config, reports)
    await watcher.poll_once()
    assert [r.job_id for r in reports] == ["1002"]

    compact_reports = Reports()
    hostile = running(5, OPT_IN, standard_output="%²j")
    sched = cli([hostile, running(6, OPT_IN, job_state="NODE_FAIL")], [])
    await SlurmWatcher(sched, config, compact_reports).poll_once()
    assert [r.job_id for r in compact_reports] == ["6"]
