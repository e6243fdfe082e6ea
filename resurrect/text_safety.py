"""Job-controlled text made safe to print on an operator's terminal.

Node names, frame names, process-group ids, log lines and notes come from jobs. Printed raw,
a control character or an escape sequence (ANSI CSI, OSC, DCS ...) reaches the operator's
terminal: it can retitle it, erase lines, move the cursor, or forge a line ("all ranks
healthy"); a bidi override reorders what the eye reads. :func:`printable` shows every
character that is not printable as its escape (``\\x1b``, ``\\u202e``, ``\\n``), so the text
reads as what it is. Printable text, the common case, passes through unchanged (one
``str.isprintable`` call). JSON output needs none of this: ``json.dumps`` escapes them.
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(value: object) -> str:
    """``str(value)`` with every non-printable character (controls, escape sequences'
    ESC, C1 controls, bidi and other format characters, line and paragraph separators,
    surrogates, unassigned code points) shown as its escape; one line, always."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def printable_lines(value: object) -> str:
    """Like :func:`printable`, but the text's own line breaks (``\\n``) stay line breaks:
    for multi-line output (a table, a report) built from job-controlled fields."""
    return "\n".join(printable(line) for line in str(value).split("\n"))
