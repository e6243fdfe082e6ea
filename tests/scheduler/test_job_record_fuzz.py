"""Fuzzing every field of a job record, from both backends and every recorded Slurm
version's JSON: one hostile record never costs another job, and a watcher poll survives it.

Each example takes a real job record (every job of every recorded ``squeue --json`` /
``scontrol show job --json`` / slurmrestd answer, 22.05 to 26.05), puts a hostile value
(number syntax of any script, output patterns with hostile widths, huge and non-finite
numbers, Slurm's number objects half-filled, nested junk) in one of its fields (or a field
below one), and reads it beside another user's intact record."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from support.slurm_rest_synthetic import SyntheticRestd
from support.slurm_text import job_row_line, owner_field_text

from resurrect.config import ResurrectConfig
from resurrect.contracts import Interruption
from resurrect.scheduler.slurm_json import parse_jobs, stepd_naming
from resurrect.scheduler.slurm_rest import SlurmRest
from resurrect.scheduler.slurm_rest_client import RestClient
from resurrect.sensors.slurm_watcher import SlurmWatcher
from tests.scheduler.test_slurm_compact import cli, running

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OPT_IN = json.dumps({"resurrect": {}})
CONFIG = ResurrectConfig.model_validate({"cluster": {"name": "c1"}})
OTHER = 424242


def recorded_jobs() -> list[dict[str, Any]]:
    """Every job record of every recorded Slurm JSON document (CLI and slurmrestd)."""
    found: list[dict[str, Any]] = []
    for path in sorted((FIXTURES / "slurm-json").rglob("*.json")):
        found += json.loads(path.read_text()).get("jobs") or []
    for path in sorted((FIXTURES / "slurm-rest").rglob("job*.json")):
        record = json.loads(path.read_text())
        found += json.loads(record["body"]).get("jobs") or []
    return [job for job in found if isinstance(job, dict) and "job_id" in job]


RECORDS = recorded_jobs()
VERSIONS = [None, (22, 5), (24, 11), (26, 5)]

NON_ASCII_DIGITS = ["²", "¹⁰", "٣", "\uff11", "\U0001d7d9", "①", "߁", "⑽", "½", "\u216b"]
digits = st.sampled_from([*NON_ASCII_DIGITS, "0", "7", "10", "99999999999999999999"])
pattern_piece = st.one_of(
    st.sampled_from(["%", "%%", "\\", "/", "(null)", "\x00", "\n", " "]),
    st.sampled_from(list("jJAabxuNntsq")),
    digits,
    st.text(max_size=3),
)
patterns = st.lists(pattern_piece, max_size=12).map("".join)
numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    digits,
    st.builds(lambda d: f"-{d}", digits),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=40), patterns)
slurm_numbers = st.fixed_dictionaries(
    {},
    optional={"set": st.booleans(), "infinite": st.booleans(), "number": scalars},
)
hostile = st.recursive(
    st.one_of(scalars, slurm_numbers),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def put(record: dict[str, Any], choices: list[int], value: Any) -> dict[str, Any]:
    """``record`` with the field that ``choices`` leads to (a key of the record, maybe a
    key or item below it) set to ``value``."""
    record = copy.deepcopy(record)
    node: Any = record
    for depth, choice in enumerate(choices):
        keys = sorted(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        key = keys[choice % len(keys)]
        below = node[key]
        if depth == len(choices) - 1 or not isinstance(below, dict | list) or not below:
            node[key] = value
            return record
        node = below
    return record


def beside_another(record: dict[str, Any], hostile_record: dict[str, Any]) -> dict[str, Any]:
    other = copy.deepcopy(record)
    other["job_id"] = OTHER
    return {"jobs": [hostile_record, other]}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, len(RECORDS) - 1),
    st.lists(st.integers(0, 10_000), min_size=1, max_size=3),
    hostile,
    st.sampled_from(VERSIONS),
)
def test_any_field_of_any_versions_record_costs_that_record_alone(
    index: int, choices: list[int], value: Any, version: tuple[int, int] | None
) -> None:
    record = RECORDS[index]
    doc = beside_another(record, put(record, choices, value))
    jobs = parse_jobs(doc, stepd_naming(version))
    assert str(OTHER) in {job.job_id for job in jobs}


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(RECORDS) - 1), st.sampled_from(sorted({"standard_output",
       "standard_error", "current_working_directory", "name", "user_name", "array_job_id",
       "array_task_id", "job_id"})), patterns)  # fmt: skip
def test_output_patterns_and_their_values_never_raise(index: int, field: str, value: str) -> None:
    record = put(RECORDS[index], [0], None)  # any one key changed too
    record[field] = value
    assert str(OTHER) in {job.job_id for job in parse_jobs(beside_another(RECORDS[index], record))}


class Reports(list[Interruption]):
    async def __call__(self, interruption: Interruption) -> str:
        self.append(interruption)
        return interruption.workflow_id


def rest_backend(restd: SyntheticRestd, token: Path) -> SlurmRest:
    client = RestClient("unix:/nonexistent/slurmrestd.sock", token, transport=restd.transport())
    return SlurmRest("c1", client, verify_timeout=1.0, poll_interval=0.01)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=3), hostile)
def test_a_rest_poll_survives_any_field_of_one_job(
    tmp_path_factory: Any, choices: list[int], value: Any
) -> None:
    token = tmp_path_factory.mktemp("token") / "token"
    token.write_text("SLURM_JWT=header.payload.signature\n")
    token.chmod(0o600)
    restd = SyntheticRestd(jobs=4, running=2, failed=1, nodes=4)
    for job in restd.jobs.values():
        job["comment"] = OPT_IN
    restd.jobs["1000"] = put(restd.jobs["1000"], choices, value)
    reports = Reports()
    watcher = SlurmWatcher(rest_backend(restd, token), CONFIG, reports)
    try:
        asyncio.run(watcher.poll_once())
    except (ValueError, httpx.HTTPError):
        reject()  # the synthetic server could not render the value: no answer to read
    assert [r.job_id for r in reports] == ["1002"]  # the other user's failure


OWNER_KEYS = ["name", "comment", "standard_output", "standard_error", "current_working_directory"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(running(5, "").keys())),
    st.one_of(hostile, patterns),
    st.sampled_from([22, 24]),
)
def test_a_cli_poll_survives_any_field_of_one_job(field: str, value: Any, major: int) -> None:
    hostile_job = running(5, OPT_IN)
    hostile_job[field] = value
    try:  # what squeue would print for it (the stand-in must render it)
        job_row_line(hostile_job)
        for key in OWNER_KEYS:
            owner_field_text(hostile_job, key)
    except (ValueError, TypeError, OverflowError, OSError, KeyError):
        reject()
    other = running(6, OPT_IN, job_state="NODE_FAIL")
    reports = Reports()
    sched = cli([hostile_job, other], [], major)
    asyncio.run(SlurmWatcher(sched, CONFIG, reports).poll_once())
    assert [r.job_id for r in reports] == ["6"]
