"""Discovery: which checkpoints exist under a root, in step order.

Checkpoints are the root's children named like a step (``step_100``, ``step-100``,
``iter_0000100``, ``global_step100``, ``checkpoint-100``, ``ckpt_100``, ``epoch_3``,
``step_100.pt`` ...). A Megatron root also has ``latest_checkpointed_iteration.txt``, which
names the iteration the job will load.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from resurrect.checkpoint.fsutil import (
    NotRegularFile,
    describe_oserror,
    lexists,
    read_capped,
    scandir_names,
)

QUARANTINE_DIR = ".resurrect-quarantine"
TRACKER_NAME = "latest_checkpointed_iteration.txt"
DAMAGE_MARKER_SUFFIX = ".resurrect-damaged"
#: Megatron writes one integer or "release"; anything bigger is not a tracker.
MAX_TRACKER_BYTES = 4096

_NAME_RE = re.compile(
    r"^(?:global[_-]?step|step|iter(?:ation)?|checkpoint|ckpt|epoch|save)[_-]?(?P<step>\d+)"
    r"(?P<ext>\.(?:pt|pth|ckpt|bin|safetensors|distcp))?"
    r"(?P<partial>\.(?:tmp|partial|incomplete|inprogress))?$",
    re.IGNORECASE,
)

Kind = Literal["dir", "file", "missing", "unreadable"]


@dataclass(frozen=True)
class Candidate:
    """One checkpoint found under the root (or named by the tracker but absent)."""

    path: Path
    step: int | None
    kind: Kind
    partial_name: bool = False
    detail: str = ""
    tracked: bool = False  # the Megatron tracker names this one
    beyond_tracker: bool = False  # a Megatron iteration newer than the tracker
    confirmed: bool = False  # Megatron: at or below the tracker, so its save completed

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class Tracker:
    """Megatron's ``latest_checkpointed_iteration.txt``."""

    path: Path
    iteration: int | None  # None: "release" or unparseable
    release: bool
    raw: str


@dataclass
class Layout:
    """Everything discovery found under a root."""

    root: Path
    candidates: list[Candidate] = field(default_factory=list)
    tracker: Tracker | None = None
    problems: list[str] = field(default_factory=list)


class RootUnreadable(Exception):
    """The root itself cannot be examined (missing, not a directory, permission)."""


def parse_step(name: str) -> tuple[int, bool, str | None] | None:
    """``(step, partial, extension)`` for a step-like name, else None."""
    match = _NAME_RE.match(name)
    if match is None:
        return None
    return int(match["step"]), match["partial"] is not None, match["ext"]


def megatron_iter_name(iteration: int) -> str:
    """Megatron's directory name for an iteration."""
    return f"iter_{iteration:07d}"


def read_tracker(root: Path) -> Tracker | None:
    """Megatron's tracker file, or None when there is none. Raises OSError if unreadable,
    a symlink, not a regular file or bigger than MAX_TRACKER_BYTES."""
    path = root / TRACKER_NAME
    try:
        raw = read_capped(path, MAX_TRACKER_BYTES).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    text = raw.strip()
    if text == "release":
        return Tracker(path, None, True, raw)
    try:
        return Tracker(path, int(text), False, raw)
    except ValueError:
        return Tracker(path, None, False, raw)


def _kind_of(path: Path, st: os.stat_result) -> tuple[Kind, str]:
    if stat.S_ISDIR(st.st_mode):
        return "dir", ""
    if stat.S_ISREG(st.st_mode):
        return "file", ""
    if stat.S_ISLNK(st.st_mode):
        return "unreadable", "symlink (not followed)"
    return "unreadable", describe_oserror(NotRegularFile(path, st.st_mode))


def discover(root: Path) -> Layout:
    """Find the checkpoints under ``root``, ordered by step (oldest first).

    Call it inside :func:`resurrect.checkpoint.fsutil.anchored` (``root``): nothing below
    the root is reached through a symlink."""
    try:
        entries = scandir_names(root)
    except OSError as exc:
        raise RootUnreadable(
            f"checkpoint root {root}: cannot list ({describe_oserror(exc)})"
        ) from exc

    layout = Layout(root)
    try:
        layout.tracker = read_tracker(root)
    except OSError as exc:
        layout.problems.append(f"{TRACKER_NAME} unreadable ({describe_oserror(exc)})")
    tracked_step = layout.tracker.iteration if layout.tracker else None
    if layout.tracker is not None and tracked_step is None and not layout.tracker.release:
        layout.problems.append(f"{TRACKER_NAME} garbled: {layout.tracker.raw.strip()[:40]!r}")

    found: list[Candidate] = []
    for name, st in entries:
        parsed = parse_step(name)
        if parsed is None or name.endswith(DAMAGE_MARKER_SUFFIX):
            continue
        step, partial, _ext = parsed
        path = root / name
        kind, detail = _kind_of(path, st)
        is_iter = name.lower().startswith("iter")
        found.append(
            Candidate(
                path=path,
                step=step,
                kind=kind,
                partial_name=partial,
                detail=detail,
                tracked=tracked_step is not None and is_iter and step == tracked_step,
                beyond_tracker=tracked_step is not None and is_iter and step > tracked_step,
                confirmed=tracked_step is not None and is_iter and step <= tracked_step,
            )
        )
    if layout.tracker is not None:
        if layout.tracker.release:
            release = root / "release"
            if not lexists(release):
                found.append(Candidate(release, None, "missing", detail="tracker says release"))
        elif tracked_step is not None and not any(c.tracked for c in found):
            missing = root / megatron_iter_name(tracked_step)
            found.append(
                Candidate(
                    missing,
                    tracked_step,
                    "missing",
                    detail=f"{TRACKER_NAME} points at missing iteration {tracked_step}",
                    tracked=True,
                )
            )
    found.sort(key=lambda c: (c.step if c.step is not None else -1, c.kind != "missing", c.name))
    layout.candidates = found
    return layout
