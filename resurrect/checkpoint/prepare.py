"""Fallback without data loss: set a job up to resume from its newest intact checkpoint.

Damaged checkpoints newer than the chosen one are moved aside into
``ROOT/.resurrect-quarantine/<name>-<UTC timestamp>`` (or, if they cannot be moved, marked
with a ``<name>.resurrect-damaged`` file). Nothing is ever deleted, and nothing leaves the
root: every rename is made between directory fds reached without symlinks, and a
quarantine folder that is a symlink, not a directory or not the root owner's is refused
(the checkpoint is marked instead). Then the framework's own pointer is made to name the
chosen checkpoint (resurrect.checkpoint.pointers: Megatron's tracker, DeepSpeed's
``latest``, Lightning's ``last.ckpt``); every layout gets a resume hint.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from datetime import UTC, datetime
from pathlib import Path

from resurrect.checkpoint.atomic import atomic_write_text
from resurrect.checkpoint.fenced import Fence, mark_fenced_writes, with_fence
from resurrect.checkpoint.findings import Progress
from resurrect.checkpoint.fsutil import (
    describe_oserror,
    first_names,
    lexists,
    list_files,
    lstat,
    open_dir,
)
from resurrect.checkpoint.layout import DAMAGE_MARKER_SUFFIX, QUARANTINE_DIR
from resurrect.checkpoint.limits import DEFAULT_LIMITS, VerifyLimits
from resurrect.checkpoint.owner import Owner
from resurrect.checkpoint.pointers import point_at, warn_if_still_loaded
from resurrect.checkpoint.resume import read_hint, write_hint
from resurrect.checkpoint.verify import VerifiedRoot, verify_confined
from resurrect.checkpoint.verify_one import DEFAULT_RECENT_S, Level, Plan
from resurrect.contracts import CheckpointVerdict

# The quarantine's names: ``<checkpoint>-<UTC stamp>``, ``.<n>`` added on a collision.
_STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
_SET_ASIDE_NAME = re.compile(
    r"(?P<name>[^\x00-\x1f\x7f]+)-(?P<stamp>[0-9]{8}T[0-9]{6}Z)(?:\.[0-9]{1,6})?"
)
# Entries of the quarantine folder looked at for what this recovery set aside before.
SET_ASIDE_LOOK_LIMIT = 4096


class _QuarantineRefused(Exception):
    """The quarantine folder cannot be trusted; the message says why."""


def prepare_resume(
    root: Path | str,
    *,
    level: Level = "quick",
    act: bool = True,
    progress: Progress | None = None,
    workers: int | None = None,
    recent_s: float = DEFAULT_RECENT_S,
    limits: VerifyLimits = DEFAULT_LIMITS,
    owner: Owner | None = None,
    fence: Fence | None = None,
    set_aside_since: float | None = None,
) -> CheckpointVerdict:
    """Verify ``root`` and make the job resume from the newest intact checkpoint.

    ``quarantined`` lists where set-aside checkpoints now are (or the damage markers written
    when a move failed). ``act=False`` decides and reports without touching anything: then
    ``quarantined`` lists the checkpoints that *would* be set aside, and ``note`` says what
    would be done. A root that is not ``owner``'s is refused (``verified=False``, nothing
    read or changed). Never raises for a bad root; never deletes.

    ``fence``: the job attempt the recovery is about to requeue, fenced from now on. With
    the fences the hint recorded before, it marks every checkpoint a fenced attempt wrote
    after its fence as damaged (resurrect.checkpoint.fenced): never chosen, set aside like
    any damaged one; the hint written records them all.

    ``set_aside_since``: when this recovery began (epoch seconds). What the quarantine folder
    holds from then on was set aside by this recovery before (an attempt of this step that
    was stopped after its move): it is reported as set aside, with what this call moves.
    """
    return verify_confined(
        root,
        level,
        lambda verified: _fall_back(
            verified,
            act=act,
            progress=progress,
            recent_s=recent_s,
            fence=fence,
            set_aside_since=set_aside_since,
        ),
        progress=progress,
        workers=workers,
        recent_s=recent_s,
        limits=limits,
        owner=owner,
    )


def _fall_back(
    verified: VerifiedRoot,
    *,
    act: bool,
    progress: Progress | None,
    recent_s: float,
    fence: Fence | None = None,
    set_aside_since: float | None = None,
) -> CheckpointVerdict:
    """Quarantine what is newer than the best intact checkpoint, point pointers and hint."""
    layout = verified.layout
    root_path = layout.root
    earlier = read_hint(root_path)
    fences = with_fence(earlier.fences if earlier is not None else (), fence)
    mark_fenced_writes(verified.plans, fences)
    best = verified.newest_valid()
    if best is None:
        return verified.to_verdict(
            "nothing changed: the job would start from scratch" if verified.plans else ""
        )
    newer_bad = verified.plans[verified.plans.index(best) + 1 :]
    stamp = datetime.now(UTC).strftime(_STAMP_FORMAT)
    actions: list[str] = []
    quarantined: list[str] = []
    still_in_root: list[str] = []  # damaged, and neither moved nor (in observe mode) movable
    for plan in newer_bad:
        moved = _set_aside(
            plan,
            root_path,
            stamp,
            act=act,
            recent_s=recent_s,
            actions=actions,
            quarantined=quarantined,
        )
        if not moved and plan.candidate.kind != "missing":
            still_in_root.append(plan.candidate.name)
    if act and set_aside_since is not None:
        for set_aside in set_aside_after(root_path, set_aside_since):
            if str(set_aside) not in quarantined:
                actions.append(
                    f"{set_aside.name} was set aside into {QUARANTINE_DIR} earlier in this recovery"
                )
                quarantined.append(str(set_aside))
    point_at(layout, best.candidate, stamp, act=act, actions=actions)
    warn_if_still_loaded(layout, still_in_root, actions)
    reason = f"newest intact checkpoint ({len(newer_bad)} newer damaged)"
    if act:
        try:
            write_hint(root_path, best.candidate.path, best.candidate.step, reason, fences)
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
) -> bool:
    """Quarantine one damaged checkpoint (or mark it, if it cannot be moved); True when it
    left the root's listing (or would, in observe mode)."""
    cand = plan.candidate
    if cand.kind == "missing":
        return False
    if plan.findings.in_progress and _recently_modified(cand.path, recent_s):
        actions.append(f"left {cand.name} in place (save may still be running)")
        return False
    dest = _free_name(root / QUARANTINE_DIR, f"{cand.name}-{stamp}")
    if not act:
        actions.append(f"would move {cand.name} to {QUARANTINE_DIR}/{dest.name}")
        quarantined.append(str(cand.path))
        return True
    try:
        _move_to_quarantine(root, cand.name, dest.name)
    except (OSError, _QuarantineRefused) as exc:
        why = describe_oserror(exc) if isinstance(exc, OSError) else str(exc)
        marker = cand.path.with_name(cand.name + DAMAGE_MARKER_SUFFIX)
        doc = {"reason": plan.findings.reason(), "marked_at": stamp}
        try:
            atomic_write_text(marker, json.dumps(doc) + "\n")
        except OSError as exc2:
            actions.append(f"could not move or mark {cand.name} ({describe_oserror(exc2)})")
            return False
        actions.append(f"marked {cand.name} damaged (move failed: {why})")
        quarantined.append(str(marker))
        return False
    actions.append(f"moved {cand.name} to {QUARANTINE_DIR}/{dest.name}")
    quarantined.append(str(dest))
    return True


def set_aside_after(root: Path, since: float, limit: int = SET_ASIDE_LOOK_LIMIT) -> list[Path]:
    """The quarantine folder's checkpoints set aside at or after ``since`` and not after now
    (epoch seconds, by the stamp in their names), oldest first; of its first ``limit``
    entries only. A folder that is missing, not a directory or a symlink holds none."""
    folder = root / QUARANTINE_DIR
    try:
        names = first_names(folder, limit)
    except OSError:
        return []
    floor, now = int(since), time.time()
    found: list[tuple[float, str]] = []
    for name in names:
        match = _SET_ASIDE_NAME.fullmatch(name)
        if match is None:
            continue
        try:
            at = datetime.strptime(match["stamp"], _STAMP_FORMAT).replace(tzinfo=UTC)
        except ValueError:
            continue
        if floor <= at.timestamp() <= now:
            found.append((at.timestamp(), name))
    return [folder / name for _, name in sorted(found)]


def _move_to_quarantine(root: Path, name: str, dest_name: str) -> None:
    """Rename ``root/name`` into the quarantine folder, between directory fds.

    The folder is created if missing; an existing one must be a real directory (not a
    symlink) owned by the root's owner, else _QuarantineRefused."""
    root_fd = open_dir(root)
    try:
        try:
            os.mkdir(QUARANTINE_DIR, 0o755, dir_fd=root_fd)
        except FileExistsError:
            pass
        else:
            if os.geteuid() == 0:  # in-process as root (an admin's CLI): keep it the owner's
                st = os.fstat(root_fd)
                os.chown(
                    QUARANTINE_DIR, st.st_uid, st.st_gid, dir_fd=root_fd, follow_symlinks=False
                )
        folder = root / QUARANTINE_DIR
        st = lstat(folder)
        if stat.S_ISLNK(st.st_mode):
            raise _QuarantineRefused(f"{QUARANTINE_DIR} is a symlink; refusing to quarantine")
        if not stat.S_ISDIR(st.st_mode):
            raise _QuarantineRefused(f"{QUARANTINE_DIR} is not a directory; refusing to quarantine")
        q_fd = open_dir(folder)
        try:
            owner_uid = os.fstat(root_fd).st_uid
            if os.fstat(q_fd).st_uid != owner_uid:
                raise _QuarantineRefused(
                    f"{QUARANTINE_DIR} is owned by uid {os.fstat(q_fd).st_uid}, not by the "
                    f"checkpoint owner (uid {owner_uid}); refusing to quarantine"
                )
            os.rename(name, dest_name, src_dir_fd=root_fd, dst_dir_fd=q_fd)
        finally:
            os.close(q_fd)
    finally:
        os.close(root_fd)


def _recently_modified(path: Path, recent_s: float) -> bool:
    try:
        st = lstat(path)
    except OSError:
        return False
    newest = st.st_mtime
    if stat.S_ISDIR(st.st_mode):
        newest = max([newest, *(f.mtime for f in list_files(path).files)])
    return time.time() - newest < recent_s


def _free_name(parent: Path, name: str) -> Path:
    candidate = parent / name
    n = 1
    while lexists(candidate):
        candidate = parent / f"{name}.{n}"
        n += 1
    return candidate
