"""Fuzzing the Slurm JSON parsers: arbitrary or mangled documents give JobInfo/NodeInfo or a
SlurmParseError, never another exception, and parse in bounded time."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resurrect.scheduler.slurm_json import (
    SlurmParseError,
    parse_jobs,
    parse_nodes,
    parse_scontrol_record,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm-json"
JOB_DOCS = [
    json.loads((FIXTURES / name).read_text())
    for name in ("squeue-22.05.json", "scontrol-show-job-24.11.json")
]
NODE_DOCS = [
    json.loads((FIXTURES / name).read_text())
    for name in ("sinfo-22.05.json", "scontrol-show-node-24.11.json")
]

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=15), inner, max_size=6)
    ),
    max_leaves=30,
)


def parse_safely(parser: Any, doc: Any) -> None:
    started = time.thread_time()
    try:
        parser(doc)
    except SlurmParseError:
        pass
    assert time.thread_time() - started < 1.0


def mangle(doc: Any, paths: list[int], replacement: Any) -> Any:
    """Replace the value at a pseudo-random position of ``doc`` with ``replacement``."""
    doc = copy.deepcopy(doc)
    node = doc
    for choice in paths:
        if isinstance(node, dict) and node:
            key = sorted(node)[choice % len(node)]
            if not isinstance(node[key], dict | list) or choice % 3 == 0:
                node[key] = replacement
                return doc
            node = node[key]
        elif isinstance(node, list) and node:
            index = choice % len(node)
            if not isinstance(node[index], dict | list) or choice % 3 == 0:
                node[index] = replacement
                return doc
            node = node[index]
        else:
            return doc
    return doc


@settings(max_examples=300, deadline=None)
@given(values)
def test_arbitrary_documents(doc: Any) -> None:
    parse_safely(parse_jobs, doc)
    parse_safely(parse_nodes, doc)
    parse_safely(parse_jobs, {"jobs": [doc]})
    parse_safely(parse_nodes, {"nodes": [doc]})


@pytest.mark.parametrize(
    ("docs", "parse"), [(JOB_DOCS, parse_jobs), (NODE_DOCS, parse_nodes)], ids=["jobs", "nodes"]
)
@settings(max_examples=400, deadline=None)
@given(st.data(), st.lists(st.integers(0, 1000), min_size=1, max_size=8), values)
def test_mangled_real_documents(
    docs: list[Any],
    parse: Callable[[Any], object],
    data: st.DataObject,
    paths: list[int],
    replacement: Any,
) -> None:
    """A real document of the kind with one value, found by ``paths``, replaced."""
    parse_safely(parse, mangle(data.draw(st.sampled_from(docs)), paths, replacement))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=3000))
def test_scontrol_records(line: str) -> None:
    started = time.thread_time()
    record = parse_scontrol_record(line)
    assert isinstance(record, dict)
    assert time.thread_time() - started < 1.0


def test_the_real_documents_still_parse() -> None:
    assert all(parse_jobs(doc) for doc in JOB_DOCS)
    assert all(parse_nodes(doc) for doc in NODE_DOCS)
