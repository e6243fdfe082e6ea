"""Where the interrupted attempt's output begins, and reading only from there.

A requeued job may append every attempt to one output file. The start of the interrupted
attempt comes from resurrect (the earlier recovery's record, else the log follower's), never
from the job's output; a mark that no longer fits the file (replaced, truncated) means the
file's start, with a note; no mark at all means the tail as it is, with a note."""

from __future__ import annotations

import os
from pathlib import Path

from support.job_output import appended_attempts

from resurrect.contracts import OutputMark
from resurrect.log_reading import attempt_output, output_mark, read_tail

ATTEMPT_0 = "attempt 0\nnode2: [rank1] RuntimeError: CUDA error: uncorrectable ECC error\n"
ATTEMPT_1 = "attempt 1\nnode4: [rank1] RuntimeError: CUDA error: uncorrectable ECC error\n"


def appended(tmp_path: Path) -> tuple[Path, OutputMark]:
    """One output file holding attempt 0, then attempt 1; where attempt 1 began."""
    return appended_attempts(tmp_path, ATTEMPT_0, ATTEMPT_1)


def texts(path: Path, begin: OutputMark | None) -> tuple[list[str], str | None]:
    read = read_tail(path, 1 << 20, owner_uid=os.getuid(), begin=begin)
    return [text for _, text in read.lines], read.note


def test_reading_from_the_mark_gives_only_the_attempt_with_its_real_line_numbers(
    tmp_path: Path,
) -> None:
    out, mark = appended(tmp_path)
    read = read_tail(out, 1 << 20, owner_uid=os.getuid(), begin=mark)
    assert read.lines == [(3, "attempt 1"), (4, ATTEMPT_1.splitlines()[1])]
    assert read.note is None


def test_a_tail_shorter_than_the_attempt_still_starts_at_a_whole_line(tmp_path: Path) -> None:
    out, mark = appended(tmp_path)
    lines, _ = texts(out, mark)
    read = read_tail(out, len(ATTEMPT_1) - 3, owner_uid=os.getuid(), begin=mark)
    assert [text for _, text in read.lines] == lines[1:]


def test_a_file_shorter_than_the_mark_is_read_from_its_start_with_a_note(tmp_path: Path) -> None:
    out, mark = appended(tmp_path)
    with out.open("r+") as file:  # the job rewrote its file
        file.truncate(0)
        file.write("attempt 1\n")
    lines, note = texts(out, mark)
    assert lines == ["attempt 1"]
    assert note is not None and "truncated or rewritten" in note and "read from its start" in note


def test_another_file_at_the_path_is_read_from_its_start_with_a_note(tmp_path: Path) -> None:
    out, mark = appended(tmp_path)
    out.rename(tmp_path / "slurm-7.out.1")  # rotated: a new file at the path
    out.write_text(ATTEMPT_1)
    lines, note = texts(out, mark)
    assert lines == ATTEMPT_1.splitlines()
    assert note is not None and "replaced or rotated" in note


def test_a_first_attempt_owns_its_files_from_their_start() -> None:
    found = attempt_output(0, ["/o/x.out"], None)
    assert found.begins == {} and found.notes == []


def test_the_earlier_recovery_record_comes_before_the_follower_mark() -> None:
    recorded = OutputMark(path="/o/x.out", inode=5, offset=100)
    followed = OutputMark(path="/o/x.out", inode=5, offset=180)
    other = OutputMark(path="/o/x.err", inode=6, offset=40)
    found = attempt_output(2, ["/o/x.out", "/o/x.err"], [recorded], [followed, other])
    assert found.begins == {"/o/x.out": recorded, "/o/x.err": other}
    assert found.notes == []


def test_no_mark_at_all_reads_the_tail_as_it_is_and_says_why() -> None:
    found = attempt_output(1, ["/o/x.out"], None, (), "no outcome of recover/c/7/0 to read")
    assert found.begins == {}
    (note,) = found.notes
    assert note.startswith("/o/x.out: where attempt 1's output begins is not known")
    assert "no outcome of recover/c/7/0 to read" in note and "earlier attempts' lines" in note
    (empty,) = attempt_output(1, ["/o/x.out"], []).notes
    assert "recorded no size of it" in empty


def test_an_output_mark_is_taken_only_of_the_owners_regular_file(tmp_path: Path) -> None:
    out, _ = appended(tmp_path)
    assert output_mark(out, os.getuid() + 1) is None
    assert output_mark(tmp_path / "missing.out", os.getuid()) is None
    os.mkfifo(tmp_path / "fifo")
    assert output_mark(tmp_path / "fifo", os.getuid()) is None
    mark = output_mark(out, os.getuid())
    assert mark == OutputMark(
        path=str(out), inode=out.stat().st_ino, offset=len(ATTEMPT_0) + len(ATTEMPT_1)
    )
