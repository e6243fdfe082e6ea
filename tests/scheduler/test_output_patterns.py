"""Attacks through the job's output path pattern (``sbatch -o``): the owner's text must
never break job listing for the cluster, nor make resurrect allocate without bound."""

from __future__ import annotations

import copy
import json
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resurrect.scheduler.slurm_json import (
    MAX_OUTPUT_PATH,
    OutputPatternError,
    expand_output_pattern,
    parse_jobs,
    stepd_naming,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm-json"
SQUEUE = json.loads((FIXTURES / "squeue-22.05.json").read_text())
SLURM_24_11 = stepd_naming((24, 11, 5))
KW = {"job_id": "42", "name": "train", "user": "alice", "first_node": "gpu1", "work_dir": "/w"}


def with_hostile_output(pattern: str, field: str = "standard_output") -> dict[str, Any]:
    doc = copy.deepcopy(SQUEUE)
    doc["jobs"][0][field] = pattern
    return doc


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("%99999999999999999999j.out", "/w/0000000042.out"),  # OverflowError before
        ("%400000000j.out", "/w/0000000042.out"),  # ~800 MiB per poll before
        ("%4e8j.out", "/w/4e8j.out"),  # "%4e" is no code: Slurm 22.05-24.11 drop the "%" only
        ("a%qb", "/w/a%qb"),  # an unknown code without width stays as it is
        ("%010j", "/w/0000000042"),
        ("%5x-%3u-%7N", "/w/train-alice-gpu1"),  # width ignored for text, as Slurm does
        ("%A_%a_%b.log", "/w/42_4294967294_4.log"),  # no array task: %a is NO_VAL
        ("100%%_%j", "/w/100%_42"),
        ("\\\\%j\\\\.out", "/w/%j.out"),  # a backslash turns expansion off, as in Slurm
        ("/abs/%J.%s.%t.%n", "/abs/42.batch.0.0"),
    ],
)
def test_hostile_patterns_expand_bounded_as_slurm_would(pattern: str, expected: str) -> None:
    tracemalloc.start()
    try:
        assert expand_output_pattern(pattern, **KW, naming=SLURM_24_11) == expected
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "pattern", ["/x/" + "%10j" * 1000, "/" + "a" * 5000, "/tmp/a\x00b", "%x" * 3000]
)
def test_an_unusable_path_is_an_output_pattern_error(pattern: str) -> None:
    with pytest.raises(OutputPatternError):
        expand_output_pattern(pattern, **KW | {"name": "n" * 100})


@pytest.mark.parametrize("field", ["standard_output", "standard_error"])
@pytest.mark.parametrize(
    "pattern", ["%99999999999999999999j.out", "/" + "%10j" * 1000, "/tmp/\x00", "%4e8j"]
)
def test_one_hostile_pattern_leaves_every_other_job_listed(field: str, pattern: str) -> None:
    clean = parse_jobs(SQUEUE)
    jobs = parse_jobs(with_hostile_output(pattern, field))
    assert [j.job_id for j in jobs] == [j.job_id for j in clean]
    assert jobs[1:] == clean[1:]
    hostile = jobs[0]
    path = hostile.stdout_path if field == "standard_output" else hostile.stderr_path
    if path is None:  # unusable: unknown path, with a note that says so
        assert any("path unknown" in note for note in hostile.notes)
    else:
        assert len(path) <= MAX_OUTPUT_PATH and not hostile.notes


def test_a_record_that_cannot_be_read_is_left_out_alone() -> None:
    doc = copy.deepcopy(SQUEUE)
    doc["jobs"][0]["nodes"] = "gpu[1-99999999]"  # a hostlist that expands to too much
    jobs = parse_jobs(doc)
    assert [j.job_id for j in jobs] == [j.job_id for j in parse_jobs(SQUEUE)][1:]


pattern_text = st.text(
    alphabet=st.sampled_from([*"%jJAaxuNntsb%\\/.-_0123456789e", "\x00", "é", "\ud800"]),
    max_size=300,
)


@settings(max_examples=1500, deadline=None)
@given(pattern_text, st.text(max_size=40), st.text(max_size=40))
def test_fuzz_expansion_never_raises_anything_else_and_stays_bounded(
    pattern: str, name: str, work_dir: str
) -> None:
    started = time.thread_time()
    try:
        out = expand_output_pattern(pattern, **KW | {"name": name, "work_dir": work_dir})
    except OutputPatternError:
        return
    assert len(out) <= MAX_OUTPUT_PATH and "\x00" not in out
    assert time.thread_time() - started < 0.1


@settings(max_examples=200, deadline=None)
@given(pattern_text, st.sampled_from(["standard_output", "standard_error"]))
def test_fuzz_job_listing_survives_any_pattern(pattern: str, field: str) -> None:
    jobs = parse_jobs(with_hostile_output(pattern, field))
    assert len(jobs) == len(SQUEUE["jobs"])
