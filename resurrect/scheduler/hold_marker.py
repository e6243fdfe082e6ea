"""The mark resurrect leaves on a job while it holds it, so a watchdog can fail open.

A requeue holds the job (``scontrol hold`` / ``requeuehold``), sets its exclusion and
releases it. If every resurrect process dies in between, the job would stay held (its owner
cannot release an administrator's hold). So while it holds a job resurrect writes
``resurrect-hold:<unix time>:<tag>`` at the end of the job's ``AdminComment`` (kept with
whatever else an administrator wrote there; checked on Slurm 22.05 and 24.11: settable by an
operator on pending and running jobs, kept across ``requeuehold``; refused on a finished
job, which is marked right after its ``requeuehold``). The hold reason alone cannot tell
resurrect's hold from an administrator's (``scontrol hold`` by any operator gives
``JobHeldAdmin``), and an administrator's hold must never be released by resurrect.
``resurrect watchdog`` releases a job that is held and carries a valid mark older than its
bound (default 2 minutes).

A mark is valid only when resurrect wrote it: its tag is an HMAC of the job id and the time
under a key only resurrect's Slurm operator user holds (:class:`HoldMarkKey`), its time is
plausible (not in the future, at most :data:`MAX_MARK_AGE_S` old), and it is the one mark,
at the end of the comment. The comment is read only where Slurm delimits it (JSON, or the
C API), never out of text a job owner's fields share; and :func:`unmarked` removes marks
until none is left, so text that nests one mark in another cannot leave a mark behind.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from resurrect.secret_file import read_or_create_key

HOLD_MARKER = "resurrect-hold:"
MAX_MARK_AGE_S = 7 * 24 * 3600.0
MAX_CLOCK_AHEAD_S = 300.0
_TAG_HEX = 32
_VALID = re.compile(rf"(?:^|\s)resurrect-hold:([0-9]{{1,12}}):([0-9a-f]{{{_TAG_HEX}}})\Z")
# what may follow the marker inside one mark: digits, the tag's hex, separators
_MARK_TAIL = frozenset("0123456789abcdef:")


class HoldMarkKey:
    """The key that tags resurrect's marks: the file ``path`` (created, mode 0600, on first
    use if missing), else ``key``, else a random key only this process knows. The worker and
    ``resurrect watchdog`` must use the same file (``watchdog.mark_key_file``)."""

    def __init__(self, path: Path | None = None, key: bytes | None = None) -> None:
        self.path = path
        self._key = key

    def get(self) -> bytes:
        if self._key is None:
            self._key = (
                read_or_create_key(self.path, "hold-mark key")
                if self.path is not None
                else secrets.token_bytes(32)
            )
        return self._key


@dataclass(frozen=True)
class HoldMark:
    """What a job's AdminComment says about resurrect's hold: ``at`` (unix time) when a
    valid mark is there; ``problem`` when something mark-like is there but is not one."""

    at: float | None
    problem: str | None = None


def _tag(key: bytes, job_id: str, at: int) -> str:
    return hmac.new(key, f"hold:{job_id}:{at}".encode(), hashlib.sha256).hexdigest()[:_TAG_HEX]


def marked(comment: str, now: float, *, key: bytes, job_id: str) -> str:
    """``comment`` with one fresh mark for ``job_id`` at its end (every older mark removed)."""
    rest = unmarked(comment)
    at = int(now)
    mark = f"{HOLD_MARKER}{at}:{_tag(key, job_id, at)}"
    return f"{rest} {mark}" if rest else mark


def unmarked(comment: str) -> str:
    """``comment`` without anything mark-like: the marker and what follows it of a mark's
    characters are removed, again and again, until the marker occurs nowhere (text such as
    ``resurrect-hresurrect-hold:1old:1`` leaves nothing behind). One pass, linear time."""
    if HOLD_MARKER not in comment:
        return comment.strip()
    size = len(HOLD_MARKER)
    out: list[str] = []
    start = -1  # where the mark being read begins in ``out``; -1: none
    for char in comment:
        if start >= 0 and char not in _MARK_TAIL:
            del out[start:]
            while out and out[-1].isspace():
                out.pop()
            start = -1
        out.append(char)
        if char == ":" and len(out) >= size and "".join(out[-size:]) == HOLD_MARKER:
            start = len(out) - size
    if start >= 0:
        del out[start:]
    return "".join(out).strip()


def read_mark(comment: str | None, *, key: bytes, job_id: str, now: float) -> HoldMark | None:
    """resurrect's mark on ``job_id`` in its AdminComment ``comment``: None when nothing
    mark-like is there; a :class:`HoldMark` with ``at`` when resurrect wrote it, else with
    the ``problem`` (another job's or another key's tag, an implausible time, several)."""
    text = comment or ""
    count = text.count(HOLD_MARKER)
    if count == 0:
        return None
    found = _VALID.search(text)
    if count > 1 or found is None:
        return HoldMark(None, "a mark resurrect did not write (malformed, or several)")
    at = int(found.group(1))
    if not hmac.compare_digest(found.group(2), _tag(key, job_id, at)):
        return HoldMark(None, "a mark whose tag is not resurrect's for this job")
    if at > now + MAX_CLOCK_AHEAD_S or at < now - MAX_MARK_AGE_S:
        return HoldMark(None, f"a mark with an implausible time ({at})")
    return HoldMark(float(at))


def has_marker(comment: str | None) -> bool:
    """Whether ``comment`` holds anything mark-like (valid or not)."""
    return HOLD_MARKER in (comment or "")
