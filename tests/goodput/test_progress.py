"""Progress signals read from a job's own output: rank 0's step lines with a zoned time."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from resurrect.goodput.progress import parse_progress, read_output_tail, read_progress

LINES = [
    "resurrect-train: job 7 restart 0 nodes node[1-2] master 127.0.0.1:20049 ckpt /c",
    "[rank0] no intact checkpoint: starting from scratch t=2026-11-30T06:00:00.500+00:00",
    "[rank0] world 2, steps 1..120, restart count 0 t=2026-11-30T06:00:00.600+00:00",
    "[rank1] step 1/120 loss 0.5000 t=2026-11-30T06:00:01.000+00:00",
    "[rank0] step 1/120 loss 0.5000 t=2026-11-30T06:00:01.000+00:00",
    "[rank0] step 10/120 loss 0.4000 t=2026-11-30T06:00:02.000Z",
    "2026-11-30 06:00:03,000 step 20 (no zone: which clock?)",
    "[rank0] resumed from /c/step_20 at step 20 t=2026-11-30T07:00:00+01:00",
    "step 21 done at 2026-11-30T06:00:05.123456789+0000",
]


def test_rank0_step_lines_with_a_zoned_time_are_marks() -> None:
    progress = parse_progress(LINES)
    assert [(m.step, m.at) for m in progress.marks] == [
        (1, datetime(2026, 11, 30, 6, 0, 1, tzinfo=UTC)),
        (10, datetime(2026, 11, 30, 6, 0, 2, tzinfo=UTC)),
        (21, datetime(2026, 11, 30, 6, 0, 5, 123456, tzinfo=UTC)),
    ]


def test_resume_lines_name_the_step_resumed_from() -> None:
    progress = parse_progress(LINES)
    assert [(r.step, r.at) for r in progress.resumes] == [
        (0, datetime(2026, 11, 30, 6, 0, 0, 500000, tzinfo=UTC)),
        (20, datetime(2026, 11, 30, 6, 0, 0, tzinfo=UTC)),
    ]


def test_the_output_file_is_read_from_its_end_and_only_if_regular(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    out.write_text("x" * 100 + "\n" + "\n".join(LINES) + "\n")
    assert len(read_progress(out).marks) == 3
    assert read_output_tail(out, max_bytes=60)[0] != "x" * 100  # a cut first line is dropped
    fifo = tmp_path / "fifo.out"
    os.mkfifo(fifo)
    assert read_output_tail(fifo) == []  # never blocks on a FIFO planted as the output
    link = tmp_path / "link.out"
    link.symlink_to(out)
    assert read_output_tail(link) == []  # never follows a symlink
    assert read_output_tail(tmp_path / "missing.out") == []


def test_long_and_binary_lines_are_bounded() -> None:
    progress = parse_progress(["\x00\xff" * 10_000 + " step 5 t=2026-11-30T06:00:00Z"])
    assert [m.step for m in progress.marks] == [5]
