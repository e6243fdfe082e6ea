"""Audit item (issue 20): the py-spy text parser's frame regex backtracked on runs of spaces.

``^\\s{2,}(.{1,1000}?) \\(([^()]{1,1000})\\)\\s*$`` tried every split of a long run of
whitespace: ~130 ms per 8 KiB line of spaces, 25 s for the 1 MiB a probe may carry (a job
controls its frames' file names, so py-spy's text). Confirmed, and fixed: the frame shape is
read in one pass, with exactly the regex's meaning (checked here against it)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from resurrect.stacks.pyspy_text import parse_frame, parse_pyspy_dump

STACKS = Path(__file__).parent.parent / "fixtures" / "stacks"
# The former pattern: the specification of a frame line.
SPECIFIED = re.compile(r"^\s{2,}(?P<function>.{1,1000}?) \((?P<where>[^()]{1,1000})\)\s*$")


def specified(line: str) -> tuple[str, str] | None:
    m = SPECIFIED.match(line)
    return None if m is None else (m["function"].strip(), m["where"].strip())


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=" \t\x0c\u3000()ab:.", max_size=40))
def test_a_frame_line_reads_as_the_pattern_says(line: str) -> None:
    assert parse_frame(line) == specified(line)


@settings(max_examples=300, deadline=None)
@given(st.integers(990, 1010), st.integers(990, 1010), st.integers(2, 5))
def test_the_length_bounds_are_the_patterns(function: int, where: int, indent: int) -> None:
    line = " " * indent + "f" * function + " (" + "w" * where + ")"
    assert parse_frame(line) == specified(line)


def test_real_dumps_read_as_before() -> None:
    for path in sorted(STACKS.glob("*.txt")):
        for line in path.read_text().splitlines():
            assert parse_frame(line) == specified(line), (path.name, line)


def test_a_megabyte_of_whitespace_lines_is_read_at_once() -> None:
    """It cost 25 s (a probe's whole text); a good stack after it is still read."""
    text = 'Thread 1 (idle): "MainThread"\n' + "\n".join([" " * 8192] * 127)
    text += "\n    main (train.py:12)\n"
    began = time.monotonic()
    dump = parse_pyspy_dump(text)
    assert time.monotonic() - began < 2.0
    [thread] = dump.threads
    assert [str(f) for f in thread.frames] == ["main (train.py:12)"]
