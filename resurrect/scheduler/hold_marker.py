"""The mark resurrect leaves on a job while it holds it, so a watchdog can fail open.

A requeue holds the job (``scontrol hold`` / ``requeuehold``), sets its exclusion and
releases it. If every resurrect process dies in between, the job would stay held (its owner
cannot release an administrator's hold). So while it holds a job resurrect writes
``resurrect-hold:<unix time>`` into the job's ``AdminComment`` (kept with whatever else an
administrator wrote there; checked on Slurm 22.05 and 24.11: settable by an operator on
pending and running jobs, kept across ``requeuehold``, shown by ``squeue --json`` and
``scontrol show job --json`` as ``admin_comment``; refused on a finished job, which is marked
right after its ``requeuehold``). The hold reason alone cannot tell resurrect's hold from an
administrator's (``scontrol hold`` by any operator gives ``JobHeldAdmin``), and an
administrator's hold must never be released by resurrect. ``resurrect watchdog`` releases a
job that is held and carries a mark older than its bound (default 2 minutes).
"""

from __future__ import annotations

import re

HOLD_MARKER = "resurrect-hold:"
_MARK = re.compile(r"\s*resurrect-hold:(\d{1,12})")


def marked(comment: str, now: float) -> str:
    """``comment`` with one fresh mark (older marks removed)."""
    rest = unmarked(comment)
    mark = f"{HOLD_MARKER}{int(now)}"
    return f"{rest} {mark}" if rest else mark


def unmarked(comment: str) -> str:
    """``comment`` without resurrect's marks."""
    return _MARK.sub("", comment).strip()


def marked_at(comment: str | None) -> float | None:
    """When resurrect marked the job (unix time), or None when it carries no mark (or the
    comment was not read)."""
    found = _MARK.findall(comment or "")
    return float(found[-1]) if found else None
