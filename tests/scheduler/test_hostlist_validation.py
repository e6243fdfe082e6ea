"""Hostlist expansion and validation of values that reach scontrol's argv."""

from __future__ import annotations

import pytest

from resurrect.errors import SchedulerError
from resurrect.scheduler.hostlist import HostlistError, compress_hostlist, expand_hostlist
from resurrect.scheduler.validation import (
    REASON_MAX,
    InvalidSchedulerArgument,
    sanitize_reason,
    validate_job_id,
    validate_node_name,
    validate_node_names,
)
from resurrect.scheduler.verified import drain_reason


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("node1", ["node1"]),
        ("node[1-3,5]", ["node1", "node2", "node3", "node5"]),
        ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
        ("a[1-2],b3,c[7]", ["a1", "a2", "b3", "c7"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("n1,n1,n[1-2]", ["n1", "n2"]),
        ("", []),
        ("(null)", []),
        (None, []),
        (" node[1-2] ", ["node1", "node2"]),
    ],
)
def test_expand_hostlist(expr: str | None, hosts: list[str]) -> None:
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize("expr", ["node[1-", "node]1", "n[3-1]", "n[a-b]", "n[[1]]", "n[1-999999]"])
def test_expand_hostlist_rejects_malformed(expr: str) -> None:
    with pytest.raises(HostlistError):
        expand_hostlist(expr)


def test_compress_is_plain_comma_list() -> None:
    assert compress_hostlist(["n1", " n2", "n1", ""]) == "n1,n2"


@pytest.mark.parametrize("name", ["node1", "gpu-a01.rack3", "n_1"])
def test_valid_node_names(name: str) -> None:
    assert validate_node_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "-x", "node1\nnode2", "node1 State=RESUME", "n;rm", "n[1-2]", "a" * 65, "n$(id)", "../n"],
)
def test_invalid_node_names(name: str) -> None:
    with pytest.raises(InvalidSchedulerArgument):
        validate_node_name(name)


def test_invalid_argument_is_a_scheduler_error() -> None:
    with pytest.raises(SchedulerError):
        validate_node_names(["ok1", "bad name"])
    assert validate_node_names(["a", "b", "a"]) == ["a", "b"]


@pytest.mark.parametrize("job_id", ["1", "123456", "12_3", " 7 "])
def test_valid_job_ids(job_id: str) -> None:
    assert validate_job_id(job_id) == job_id.strip()


@pytest.mark.parametrize("job_id", ["", "abc", "1;2", "-1", "1 2", "1\n2", "12345678901"])
def test_invalid_job_ids(job_id: str) -> None:
    with pytest.raises(InvalidSchedulerArgument):
        validate_job_id(job_id)


def test_reason_cannot_smuggle_lines_quotes_or_shell() -> None:
    reason = sanitize_reason("xid 79\nState=RESUME'; rm -rf / `id` $(x) | y & z > w\x00\x1b[31m")
    assert "\n" not in reason and "\x00" not in reason and "\x1b" not in reason
    for ch in "'\"`$;|&<>\\":
        assert ch not in reason
    assert reason.startswith("xid 79 State=RESUME_")


def test_reason_length_cap_and_prefix() -> None:
    long = drain_reason("x" * 1000)
    assert len(long) == REASON_MAX
    assert long.startswith("resurrect: ")
    assert drain_reason("resurrect: gpu.hardware inc-1") == "resurrect: gpu.hardware inc-1"
    with pytest.raises(InvalidSchedulerArgument):
        sanitize_reason(" \n\t ")
