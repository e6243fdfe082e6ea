"""resurrect's hold mark in a job's AdminComment (resurrect.scheduler.hold_marker)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from resurrect.scheduler.hold_marker import (
    HOLD_MARKER,
    MAX_MARK_AGE_S,
    has_marker,
    marked,
    read_mark,
    unmarked,
)

KEY = b"k" * 32
NOW = 1_700_000_000.7


def test_a_mark_keeps_what_an_administrator_wrote() -> None:
    comment = marked("ticket 42", NOW, key=KEY, job_id="7")
    assert comment.startswith("ticket 42 resurrect-hold:1700000000:")
    mark = read_mark(comment, key=KEY, job_id="7", now=NOW + 5)
    assert mark is not None and mark.at == 1700000000 and mark.problem is None
    assert unmarked(comment) == "ticket 42"


def test_marking_again_replaces_the_old_mark() -> None:
    comment = marked(marked("", 100, key=KEY, job_id="7"), 200, key=KEY, job_id="7")
    assert comment.count(HOLD_MARKER) == 1
    assert read_mark(comment, key=KEY, job_id="7", now=300) is not None


def test_no_mark_means_not_held_by_resurrect() -> None:
    for comment in ("", None, "held by admin"):
        assert read_mark(comment, key=KEY, job_id="7", now=NOW) is None
        assert not has_marker(comment)
    assert unmarked("plain") == "plain"


def test_only_marks_resurrect_wrote_for_this_job_in_a_plausible_time_count() -> None:
    ours = marked("", NOW, key=KEY, job_id="7")
    problems = {
        "another key": marked("", NOW, key=b"x" * 32, job_id="7"),
        "another job": marked("", NOW, key=KEY, job_id="8"),
        "untagged, the old form": "resurrect-hold:1700000000",
        "a forged far past": marked("", 1.0, key=KEY, job_id="7"),
        "the future": marked("", NOW + 3600, key=KEY, job_id="7"),
        "not at the end": f"{ours} more text",
        "two marks": f"{ours} {ours}",
    }
    for why, comment in problems.items():
        mark = read_mark(comment, key=KEY, job_id="7", now=NOW)
        assert mark is not None and mark.at is None and mark.problem, why
    old = marked("", NOW - MAX_MARK_AGE_S + 60, key=KEY, job_id="7")
    assert read_mark(old, key=KEY, job_id="7", now=NOW) is not None


def test_nested_marks_leave_nothing_behind() -> None:
    # one removal pass would leave "resurrect-hold:1" out of the nested text
    assert unmarked("x resurrect-hresurrect-hold:1old:1  y") == "x  y"
    deep = "resurrect-h" * 50 + "resurrect-hold:9" + "old:9" * 50
    assert unmarked(deep) == ""
    assert unmarked("a resurrect-hold: b resurrect-hold:12:ab") == "a b"


@given(st.lists(st.sampled_from(["resurrect-h", "old:", "1", "a", " ", "x", ":"])).map("".join))
def test_unmarking_reaches_a_fixpoint_without_the_marker(text: str) -> None:
    once = unmarked(text)
    assert HOLD_MARKER not in once
    assert unmarked(once) == once
