"""Attack 9 (issue 20): job-controlled text reached an operator's terminal raw.

A rank's node name, frame names, Flight Recorder process-group ids and notes are the job's.
Printed raw by ``resurrect stacks dump`` or ``stacks flight-recorder``, an escape sequence
retitled root's terminal, erased lines and forged an "all ranks healthy" line. Every
operator CLI now prints such text through :func:`resurrect.text_safety.printable`: the
sequences are shown as escapes, and the text still reads."""

from __future__ import annotations

import json

import pytest

from resurrect.text_safety import printable, printable_lines

HOSTILE = [
    "\x1b]0;pwned\x07",  # OSC: set the window title
    "\x1b[2K\x1b[1A",  # CSI: erase the line, cursor up
    "\x1b[31mred",
    "\x9b31m",  # C1 CSI
    "node\rall ranks healthy",
    "node\nall ranks healthy",
    "\u202egnp.exe",  # right-to-left override
    "\u2066isolate\u2069",
    "\u2028line separator",
    "\x00\x7f",
    "\ud800",  # a lone surrogate
]


@pytest.mark.parametrize("text", HOSTILE)
def test_no_control_or_format_character_survives(text: str) -> None:
    shown = printable(text)
    assert shown.isprintable()
    assert "\x1b" not in shown and "\n" not in shown and "\r" not in shown


def test_escapes_are_visible_and_readable() -> None:
    assert printable("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07"
    assert printable("a\u202eb") == "a\\u202eb"
    assert printable("node\nall ranks healthy") == "node\\nall ranks healthy"
    assert printable("\U000e0041") == "\\U000e0041"  # a tag character


def test_printable_text_is_unchanged() -> None:
    for text in ("rank 3 on gpu-node-17", "émoji ✓ 日本語", "c10d::ProcessGroupNCCL::allreduce"):
        assert printable(text) == text


def test_multi_line_output_keeps_its_own_lines_only() -> None:
    assert printable_lines("a\x1b[2K\nb\rc") == "a\\x1b[2K\nb\\rc"


def test_json_output_needs_no_escaping() -> None:
    for text in HOSTILE:
        assert json.dumps(text).isprintable()
