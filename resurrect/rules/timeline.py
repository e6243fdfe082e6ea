"""When log lines were printed: their timestamps, the silence between lines, print order.

A line's time is read from an ISO date and time, a glog prefix (``E1206 18:44:12``) or a leading
clock; lines without one keep the order they were read in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from resurrect.contracts import Evidence
from resurrect.rules.text import split_prefixes

_ISO = re.compile(r"([0-9]{4})-([0-9][0-9])-([0-9][0-9])[ T]([0-9][0-9]):([0-9][0-9]):([0-9][0-9])")
_GLOG = re.compile(
    r"(?:^|[\s\[])[IWEF]([0-9][0-9])([0-9][0-9]) ([0-9][0-9]):([0-9][0-9]):([0-9][0-9])\b"
)
_CLOCK = re.compile(r"^\[?([0-9][0-9]):([0-9][0-9]):([0-9][0-9])\b(?![<:])")


@dataclass(frozen=True)
class Stamp:
    """When a line was printed, as precisely as the line says."""

    day: date | None
    """The date; year 2000 stands in when the line has month and day only (glog)."""
    has_year: bool
    seconds: int
    """Seconds since midnight."""


def stamp_of(text: str | None) -> Stamp | None:
    """The time a line carries: ISO date and time, glog ``E1206 18:44:12``, or a leading clock."""
    if not text:
        return None
    try:
        if m := _ISO.search(text):
            y, mo, d, hh, mm, ss = (int(g) for g in m.groups())
            return Stamp(date(y, mo, d), True, hh * 3600 + mm * 60 + ss)
        if m := _GLOG.search(text):
            mo, d, hh, mm, ss = (int(g) for g in m.groups())
            return Stamp(date(2000, mo, d), False, hh * 3600 + mm * 60 + ss)
    except ValueError:
        return None
    if m := _CLOCK.match(split_prefixes(text).body.lstrip()):
        hh, mm, ss = (int(g) for g in m.groups())
        if hh < 24 and mm < 60 and ss < 60:
            return Stamp(None, False, hh * 3600 + mm * 60 + ss)
    return None


def gap_s(before: Stamp, after: Stamp) -> int:
    """Seconds from ``before`` to ``after`` (within a day when either lacks a date)."""
    if before.day and after.day and before.has_year == after.has_year:
        return (after.day - before.day).days * 86400 + after.seconds - before.seconds
    return (after.seconds - before.seconds) % 86400


def silence_before(ev: Evidence) -> int | None:
    """Seconds between the line before ``ev`` and ``ev`` itself, when both carry a time."""
    at = stamp_of(ev.fields.get("ts")) or stamp_of(ev.text)
    before = stamp_of(ev.fields.get("previous_line"))
    if at is None or before is None:
        return None
    return gap_s(before, at)


def print_order(evidence: Sequence[Evidence]) -> list[Evidence]:
    """Evidence in the order it was printed: by its timestamps when every line has one."""
    stamps = [stamp_of(e.text) for e in evidence]
    if evidence and all(s is not None for s in stamps):
        keyed = sorted(
            zip(stamps, range(len(evidence)), evidence, strict=True),
            key=lambda t: (t[0].day or date.min, t[0].seconds, t[1]) if t[0] else (date.min, 0, 0),
        )
        return [e for _, _, e in keyed]
    return list(evidence)
