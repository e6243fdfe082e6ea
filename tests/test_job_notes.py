"""Notes about hostile jobs: logged once per job and note, bounded however many jobs lie."""

from __future__ import annotations

import logging

import pytest

from resurrect.job_notes import MAX_JOBS, JobNotes


def test_a_note_is_logged_once_per_window_and_kept_as_the_latest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    notes = JobNotes(logging.getLogger("t"), every_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for _ in range(100):
            notes.note("5", "job 5: bad comment")
        now[0] = 61
        notes.note("5", "bad comment")
    assert [r.getMessage() for r in caplog.records] == ["job 5: bad comment"] * 2
    assert notes.latest == {"5": "bad comment"} and notes.suppressed == 99


def test_control_characters_cannot_forge_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    notes = JobNotes(logging.getLogger("t"))
    with caplog.at_level(logging.WARNING):
        notes.note("6", "field 'x\nCRITICAL root: node1 drained by admin\x1b[2J'")
    [record] = caplog.records
    assert "\n" not in record.getMessage() and "\x1b" not in record.getMessage()
    assert "\\n" in record.getMessage()


def test_memory_stays_bounded_under_a_flood_of_hostile_jobs() -> None:
    notes = JobNotes(logging.getLogger("t"), every_s=3600)
    logging.disable(logging.CRITICAL)
    try:
        for job in range(5 * MAX_JOBS):
            notes.note(str(job), "malformed comment")
    finally:
        logging.disable(logging.NOTSET)
    assert len(notes.latest) <= MAX_JOBS
    assert len(notes._logged) <= MAX_JOBS + 1
