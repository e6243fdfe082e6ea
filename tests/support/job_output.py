"""A requeued job's output file, as Slurm leaves it when every attempt appends to it."""

from __future__ import annotations

import os
from pathlib import Path

from resurrect.contracts import OutputMark
from resurrect.log_reading import output_mark


def appended_attempts(tmp_path: Path, attempt_0: str, attempt_1: str) -> tuple[Path, OutputMark]:
    """Job 7's output file (``slurm-7.out`` in ``tmp_path``) holding ``attempt_0``, then
    ``attempt_1``; with the mark of where attempt 1 began, taken as the log follower takes it."""
    out = tmp_path / "slurm-7.out"
    out.write_text(attempt_0)
    mark = output_mark(out, os.getuid())
    assert mark is not None and mark.offset == len(attempt_0)
    with out.open("a") as file:
        file.write(attempt_1)
    return out, mark
