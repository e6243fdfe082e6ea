"""Fallback without data loss: set a job up to resume from its newest intact checkpoint.

Damaged checkpoints newer than the chosen one are moved aside into
``ROOT/.resurrect-quarantine/<name>-<UTC timestamp>`` (or, if they cannot be moved, marked
with a ``<name>.resurrect-damaged`` file). Nothing is ever deleted. A Megatron tracker is
rewritten atomically (the old one kept as a backup); every layout gets a resume hint.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from resurrect.checkpoint.atomic import atomic_write_text
from resurrect.checkpoint.check import DEFAULT_RECENT_S, Level, Plan
from resurrect.checkpoint.findings import Progress
from resurrect.checkpoint.fsutil import describe_oserror, list_files
from resurrect.checkpoint.layout import (
    DAMAGE_MARKER_SUFFIX,
    QUARANTINE_DIR,
    TRACKER_NAME,
    Layout,
    RootUnreadable,
    discover,
)
from resurrect.checkpoint.resume import write_hint
from resurrect.checkpoint.verify import verify_layout
from resurrect.contracts import CheckpointVerdict


def prepare_resume(
    root: Path | str,
    *,
    level: Level = "quick",
    act: bool = True,
    progress: Progress | None = None,
    workers: int | None = None,
    recent_s: float = DEFAULT_RECENT_S,
) -> CheckpointVerdict:
    """Verify ``root`` and make the job resume from the newest intact checkpoint.

    ``quarantined`` lists where set-aside checkpoints now are (or the damage markers written
    when a move failed). ``act=False`` decides and reports without touching anything: then
    ``quarantined`` lists the checkpoints that *would* be set aside, and ``note`` says what
    would be done. Never raises for a bad root; never deletes.
    """
    root_path = Path(root)
    try:
        layout = discover(root_path)
    except RootUnreadable as exc:
        return CheckpointVerdict(root=str(root_path), verified=False, note=str(exc))
    verified = verify_layout(layout, level, progress=progress, workers=workers, recent_s=recent_s)
    best = verified.newest_valid()
    if best is None:
        return verified.to_verdict(
            "nothing changed: the job would start from scratch" if verified.plans else ""
        )
    newer_bad = verified.plans[verified.plans.index(best) + 1 :]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    actions: list[str] = []
    quarantined: list[str] = []
    for plan in newer_bad:
        _set_aside(
            plan,
            root_path,
            stamp,
            act=act,
            recent_s=recent_s,
            actions=actions,
            quarantined=quarantined,
        )
    _point_tracker(layout, best, stamp, act=act, actions=actions)
    reason = f"newest intact checkpoint ({len(newer_bad)} newer damaged)"
    if act:
        try:
            write_hint(root_path, best.candidate.path, best.candidate.step, reason)
            actions.append(f"wrote resume hint -> {best.candidate.name}")
        except OSError as exc:
            actions.append(f"could not write resume hint ({describe_oserror(exc)})")
    else:
        actions.append(f"would write resume hint -> {best.candidate.name}")
    if progress is not None:
        progress(f"{root_path}: resume from {best.candidate.name}")
    prefix = "observe mode (nothing changed): " if not act else ""
    verdict = verified.to_verdict(prefix + "; ".join(actions))
    verdict.quarantined = quarantined
    return verdict


def _set_aside(
    plan: Plan,
    root: Path,
    stamp: str,
    *,
    act: bool,
    recent_s: float,
    actions: list[str],
    quarantined: list[str],
) -> None:
    """Quarantine one damaged checkpoint (or mark it, if it cannot be moved)."""
    cand = plan.candidate
    if cand.kind == "missing":
        return
    if plan.findings.in_progress and _recently_modified(cand.path, recent_s):
        actions.append(f"left {cand.name} in place (save may still be running)")
        return
    dest = _free_name(root / QUARANTINE_DIR, f"{cand.name}-{stamp}")
    if not act:
        actions.append(f"would move {cand.name} to {QUARANTINE_DIR}/{dest.name}")
        quarantined.append(str(cand.path))
        return
    try:
        dest.parent.mkdir(exist_ok=True)
        os.rename(cand.path, dest)
    except OSError as exc:
        marker = cand.path.with_name(cand.name + DAMAGE_MARKER_SUFFIX)
        doc = {"reason": plan.findings.reason(), "marked_at": stamp}
        try:
            atomic_write_text(marker, json.dumps(doc) + "\n")
        except OSError as exc2:
            actions.append(f"could not move or mark {cand.name} ({describe_oserror(exc2)})")
            return
        actions.append(f"marked {cand.name} damaged (move failed: {describe_oserror(exc)})")
        quarantined.append(str(marker))
        return
    actions.append(f"moved {cand.name} to {QUARANTINE_DIR}/{dest.name}")
    quarantined.append(str(dest))


def _point_tracker(
    layout: Layout, best: Plan, stamp: str, *, act: bool, actions: list[str]
) -> None:
    """Rewrite Megatron's tracker to the chosen iteration, keeping a backup of the old one."""
    tracker = layout.tracker
    step = best.candidate.step
    if tracker is None or step is None or not best.candidate.name.lower().startswith("iter"):
        return
    if tracker.iteration == step:
        return
    backup = tracker.path.with_name(f"{TRACKER_NAME}.resurrect-bak-{stamp}")
    if not act:
        actions.append(f"would set {TRACKER_NAME} to {step} (backup {backup.name})")
        return
    try:
        shutil.copy2(tracker.path, backup)
        atomic_write_text(tracker.path, f"{step}\n")
    except OSError as exc:
        actions.append(f"could not rewrite {TRACKER_NAME} ({describe_oserror(exc)})")
        return
    actions.append(
        f"set {TRACKER_NAME} to {step} (was {tracker.raw.strip()!r}, backup {backup.name})"
    )


def _recently_modified(path: Path, recent_s: float) -> bool:
    try:
        newest = os.stat(path).st_mtime
    except OSError:
        return False
    if os.path.isdir(path):
        newest = max([newest, *(f.mtime for f in list_files(path).files)])
    return time.time() - newest < recent_s


def _free_name(parent: Path, name: str) -> Path:
    candidate = parent / name
    n = 1
    while os.path.lexists(candidate):
        candidate = parent / f"{name}.{n}"
        n += 1
    return candidate
