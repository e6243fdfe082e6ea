"""Fuzzing the compact Slurm parsers: arbitrary or mangled lines are left out, never raise,
and parse in bounded time; whatever text a job's owner writes comes back as that job's own
value and never changes another job's record."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.slurm_text import job_row_line

from resurrect.scheduler import slurm_compact as compact
from tests.scheduler.test_slurm_compact import cli, running

GOOD = job_row_line(running(1, '{"resurrect": {}}'))
owner_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)) | st.sampled_from(["|", "\n", "%"]),
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_never_raises(text: str) -> None:
    started = time.thread_time()
    compact.parse_job_rows(text)
    compact.parse_node_lines(text)
    assert time.thread_time() - started < 1.0


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=0, max_value=len(GOOD)), st.text(max_size=20))
def test_a_mangled_line_is_the_record_or_left_out(at: int, insert: str) -> None:
    line = GOOD[:at] + insert + GOOD[at:]
    rows = compact.parse_job_rows(line + "\n" + GOOD.replace("1|1|N/A", "2|2|N/A", 1))
    assert [r.job_id for r in rows if r.job_id == "2"] == ["2"]
    for row in rows:
        assert row.state.value in {"RUNNING"} or row.job_id == "1"


@settings(max_examples=150, deadline=None)
@given(owner_text, owner_text, owner_text, owner_text)
def test_owner_text_comes_back_as_written(comment: str, name: str, out: str, work: str) -> None:
    hostile: dict[str, Any] = running(
        5,
        comment,
        name=name,
        standard_output=out or "x",
        current_working_directory="/w" + work.replace("\x00", ""),
    )
    sched = cli([hostile, running(6, "plain")], [])
    jobs = {j.job_id: j for j in asyncio.run(sched.list_active_jobs())}
    assert set(jobs) <= {"5", "6"} and "6" in jobs
    assert jobs["6"].comment == "plain" and jobs["6"].user_id == 1001
    if "5" in jobs:  # left out only if its output pattern gives no usable path
        # Slurm prints an unset string as "(null)": a comment of that text reads as unset
        assert jobs["5"].comment == ("" if comment == "(null)" else comment)
        assert jobs["5"].name == ("" if name == "(null)" else name)
