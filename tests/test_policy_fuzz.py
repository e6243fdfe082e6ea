"""Fuzzing the job-comment parser: arbitrary text never crashes it, and stays fast."""

from __future__ import annotations

import gc
import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState
from resurrect.policy import resolve_job_policy

CONFIG = ResurrectConfig()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


def resolve(comment: str) -> None:
    """Resolve ``comment`` within 0.5 s of this thread's CPU time. The garbage collector is
    off meanwhile: a full collection of the test process' heap (thousands of tests in) is
    not the parser's work."""
    job = JobInfo(job_id="1", state=JobState.RUNNING, comment=comment)
    gc.disable()
    try:
        started = time.thread_time()
        resolution = resolve_job_policy(job, CONFIG)
        spent = time.thread_time() - started
    finally:
        gc.enable()
    assert spent < 0.5
    assert resolution.source in {"comment", "partition", "default", "malformed_comment"}
    if resolution.source == "malformed_comment":
        assert resolution.problems and not resolution.opted_in


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_arbitrary_text(comment: str) -> None:
    resolve(comment)
    resolve("resurrect " + comment)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_arbitrary_json_under_the_resurrect_key(value: object) -> None:
    resolve(json.dumps({"resurrect": value}))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000))
def test_binary_junk_decoded_as_slurm_would_show_it(data: bytes) -> None:
    resolve(data.decode("utf-8", "replace"))
