"""resurrect's hold mark in a job's AdminComment (resurrect.scheduler.hold_marker)."""

from __future__ import annotations

from resurrect.scheduler.hold_marker import marked, marked_at, unmarked


def test_a_mark_keeps_what_an_administrator_wrote() -> None:
    comment = marked("ticket 42", 1700000000.7)
    assert comment == "ticket 42 resurrect-hold:1700000000"
    assert marked_at(comment) == 1700000000
    assert unmarked(comment) == "ticket 42"


def test_marking_again_replaces_the_old_mark() -> None:
    comment = marked(marked("", 100), 200)
    assert comment == "resurrect-hold:200" and marked_at(comment) == 200


def test_no_mark_means_not_held_by_resurrect() -> None:
    assert marked_at("") is None
    assert marked_at("resurrect-hold:") is None
    assert marked_at("held by admin") is None
    assert unmarked("plain") == "plain"
