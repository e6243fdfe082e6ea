"""The resume hint, and :func:`resume_path`, which training scripts call on start.

``prepare_resume`` writes ``ROOT/resurrect-resume.json`` naming the checkpoint to resume
from, and the job attempts fenced so far (resurrect.checkpoint.fenced). :func:`resume_path`
honours it, but a checkpoint saved after the hint (a higher step that verifies) wins, so a
stale hint never rolls a job back - unless a fenced attempt wrote it after its fence: that
one is never chosen. Without a hint it scans.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from resurrect.checkpoint.atomic import atomic_write_text
from resurrect.checkpoint.fenced import Fence, fences_from, mark_fenced_writes
from resurrect.checkpoint.fsutil import anchored, read_capped
from resurrect.checkpoint.layout import RootUnreadable, discover
from resurrect.checkpoint.verify import verify_layout
from resurrect.checkpoint.verify_one import Level

HINT_NAME = "resurrect-resume.json"
MAX_HINT_BYTES = 64 << 10


@dataclass(frozen=True)
class ResumeHint:
    """What prepare_resume decided: resume from ``name`` (a child of the root) at ``step``."""

    name: str
    step: int | None
    written_at: str
    reason: str
    fences: tuple[Fence, ...] = ()


def write_hint(
    root: Path, target: Path, step: int | None, reason: str, fences: Sequence[Fence] = ()
) -> Path:
    """Atomically write the resume hint for ``target`` (a checkpoint under ``root``), with
    the job attempts fenced so far."""
    doc = {
        "path": str(target),
        "name": target.name,
        "step": step,
        "written_at": datetime.now(UTC).isoformat(),
        "reason": reason,
        "fences": [f.as_json() for f in fences],
    }
    hint = root / HINT_NAME
    atomic_write_text(hint, json.dumps(doc, indent=1) + "\n")
    return hint


def read_hint(root: Path) -> ResumeHint | None:
    """The hint under ``root``, or None if absent or unreadable (then callers scan)."""
    try:
        doc = json.loads(read_capped(root / HINT_NAME, MAX_HINT_BYTES))
        name = str(doc["name"])
        step = doc.get("step")
        if "/" in name or name in {"", ".", ".."} or not (step is None or isinstance(step, int)):
            return None
        return ResumeHint(
            name,
            step,
            str(doc.get("written_at", "")),
            str(doc.get("reason", "")),
            tuple(fences_from(doc.get("fences"))),
        )
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def resume_path(root: Path | str, *, level: Level = "quick") -> Path | None:
    """The checkpoint a job should resume from, or None to start from scratch.

    Order: a verified checkpoint newer than the hint; else the hinted checkpoint if it
    verifies; else the newest checkpoint that verifies. A checkpoint written by a fenced
    attempt after its fence (the hint's fences) counts as not verifying. Never raises for a
    bad root.
    """
    root_path = Path(root)
    try:
        with anchored(root_path):
            layout = discover(root_path)
            verified = verify_layout(layout, level)
            hint = read_hint(root_path)
            if hint is not None:
                mark_fenced_writes(verified.plans, hint.fences)
    except (OSError, RootUnreadable):
        return None
    best = verified.newest_valid()
    if hint is None:
        return best.candidate.path if best else None
    hinted = next((p for p in verified.plans if p.candidate.name == hint.name), None)
    if hinted is None or not hinted.findings.valid:
        return best.candidate.path if best else None
    if best is not None and _step(best.candidate.step) > _step(hint.step):
        return best.candidate.path
    return hinted.candidate.path


def _step(step: int | None) -> int:
    return -1 if step is None else step
