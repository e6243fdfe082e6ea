"""Numbers in text that a job's owner (or the output of a tool quoting it) may have written.

``str.isdigit()`` accepts far more than ``0-9``: superscripts (``²``), circled digits,
Arabic-Indic, fullwidth and mathematical digits. ``int()`` takes some of those and raises
``ValueError`` on the others, and it also takes white space, ``_`` and ``+``. Slurm, the
kernel and every file format resurrect reads write numbers as ASCII digits, so a number is
read from nothing else: :func:`ascii_int` gives None for any other text and never raises.
"""

from __future__ import annotations

# More digits than any count, id or time resurrect reads (a 64-bit value has 20).
MAX_DIGITS = 20


def is_ascii_digits(text: str) -> bool:
    """``text`` is one or more of ``0-9`` and nothing else."""
    return text.isascii() and text.isdigit()


def ascii_int(text: str, *, signed: bool = False, max_digits: int = MAX_DIGITS) -> int | None:
    """``text`` as an int when it is ASCII digits (after one ``-`` where ``signed``), at
    most ``max_digits`` of them; None for anything else."""
    digits = text[1:] if signed and text.startswith("-") else text
    if len(digits) > max_digits or not is_ascii_digits(digits):
        return None
    return int(text)
