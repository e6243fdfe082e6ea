"""Reading the end of a job's output file safely.

Job output is untrusted and can be anything: huge, binary, being written, gone. This reads
at most ``max_bytes`` from the end, cuts each line at ``max_line_bytes``, decodes with
replacement characters, and returns real 1-based line numbers (counted in bounded chunks,
never loading the file whole). A file that cannot be read yields no lines and a log warning.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

CHUNK = 1 << 20
MAX_LINE_BYTES = 64 * 1024


def _count_newlines(handle: object, end: int) -> int:
    count = 0
    position = 0
    while position < end:
        block = handle.read(min(CHUNK, end - position))  # type: ignore[attr-defined]
        if not block:
            break
        count += block.count(b"\n")
        position += len(block)
    return count


def read_tail_lines(
    path: Path, max_bytes: int, *, max_line_bytes: int = MAX_LINE_BYTES
) -> list[tuple[int, str]]:
    """The last lines of ``path`` within ``max_bytes``, as (line number, text)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - max_bytes)
            first_line = 1 + _count_newlines(handle, start) if start else 1
            handle.seek(start)
            data = handle.read(size - start)
    except OSError as exc:
        log.warning("cannot read job output %s: %s", path, exc.strerror or exc)
        return []
    lines = data.split(b"\n")
    if start and lines:
        lines = lines[1:]  # the first piece is the end of a line we did not read whole
        first_line += 1
    if lines and lines[-1] == b"":
        lines.pop()
    return [
        (first_line + index, raw[:max_line_bytes].decode("utf-8", "replace").rstrip("\r"))
        for index, raw in enumerate(lines)
    ]
