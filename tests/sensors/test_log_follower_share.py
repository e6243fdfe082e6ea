"""A look at one followed file takes at most its job's share (bytes, distinct lines, CPU
time); blank and repeated lines are dropped in C loops; what a look leaves is read at the
next one, line numbers intact; a file that falls too far behind is skipped ahead, counted."""

from __future__ import annotations

import itertools
from pathlib import Path

from resurrect.sensors.follower_share import DistinctLines, FollowerShare, LookBudget
from resurrect.sensors.log_follower import FollowedFile


def walk(chunk: bytes) -> list[tuple[int, int, bytes]]:
    walker = DistinctLines(chunk)
    return list(iter(walker.advance, None))


def test_distinct_lines_come_once_at_their_first_appearance_with_its_line_number() -> None:
    chunk = b"a\n\nb\na\n  \nb\nc\n"
    assert walk(chunk) == [(0, 0, b"a"), (2, 1, b""), (3, 2, b"b"), (7, 4, b"  "), (12, 6, b"c")]
    assert walk(b"\nx\n") == [(0, 0, b""), (1, 1, b"x")]
    assert walk(b"") == [] and walk(b"\n\n\n") == [(0, 0, b"")]
    # a line is only ever matched whole: "b" is not found inside "ab"
    assert walk(b"ab\nb\n") == [(0, 0, b"ab"), (3, 1, b"b")]


def test_a_file_of_blank_and_repeated_lines_gives_each_distinct_line_once(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_bytes(b"\n" * 100_000 + b"tick\n" * 50_000 + b"tock\ntick\n" + b" \n" * 1000)
    followed = FollowedFile(str(path))
    assert followed.read_new_lines() == [(100_001, b"tick"), (150_001, b"tock")]
    assert followed.line_number == 151_002 and followed.offset == path.stat().st_size


def test_a_spent_line_share_leaves_the_rest_for_the_next_look(tmp_path: Path) -> None:
    path = tmp_path / "out"
    lines = [f"line {n}".encode() for n in range(1, 101)]
    path.write_bytes(b"\n".join(itertools.chain(*zip(lines, [b""] * 100, strict=True))) + b"\n")
    followed = FollowedFile(str(path))
    share = FollowerShare(lines=30)
    seen: list[tuple[int | None, bytes]] = []
    looks = 0
    while batch := followed.read_new_lines(LookBudget(share)):
        looks += 1
        assert len(batch) <= 30
        seen.extend(batch)
    assert seen == [(2 * n - 1, text) for n, text in enumerate(lines, 1)]  # none lost, in order
    assert looks == 4


def test_a_spent_byte_share_reads_the_rest_at_the_next_look(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_bytes(b"".join(b"%05d\n" % n for n in range(1000)))  # 6000 bytes
    followed = FollowedFile(str(path))
    budget = LookBudget(FollowerShare(bytes=1000))
    first = followed.read_new_lines(budget)
    assert budget.bytes_left == 0 and followed.consumed == 1000
    assert first[0] == (1, b"00000") and first[-1] == (166, b"00165")  # 166 whole lines
    assert followed.pending == b"0016"  # the cut line waits for the rest
    assert followed.read_new_lines(LookBudget(FollowerShare(bytes=1000)))[0] == (167, b"00166")


def test_a_spent_cpu_share_still_hands_out_one_line_and_resumes_after_it(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_bytes(b"one\ntwo\nthree\n")
    followed = FollowedFile(str(path))
    ticks = iter(range(100))

    def clock() -> float:  # every reading of the CPU clock is one second later
        return float(next(ticks))

    budget = LookBudget(FollowerShare(cpu_s=0.5), clock=clock)
    assert followed.read_new_lines(budget) == [(1, b"one")]
    assert followed.read_new_lines() == [(2, b"two"), (3, b"three")]


def test_a_file_too_far_behind_goes_on_from_its_end_and_counts_what_it_skipped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "out"
    path.write_bytes(b"first\n")
    followed = FollowedFile(str(path))
    share = FollowerShare(max_behind=4096, resume_from=1024)
    assert followed.read_new_lines(LookBudget(share)) == [(1, b"first")]
    with path.open("ab") as out:
        out.write(b"".join(b"%07d\n" % n for n in range(1000)))  # 8000 bytes
    lines = followed.read_new_lines(LookBudget(share))
    assert followed.skipped == 8000 - 1024
    assert lines[0][0] is None  # line numbers are unknown after a skip
    assert lines[-1] == (None, b"0000999") and len(lines) == 1024 // 8
    assert followed.line_number is None
