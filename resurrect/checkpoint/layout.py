"""Discovery: which checkpoints exist under a root, in step order, and what the job loads.

Checkpoints are the root's children named like a step (``step_100``, ``step-100``,
``iter_0000100``, ``global_step100``, ``checkpoint-100``, ``ckpt_100``, ``epoch_3``,
``step_100.pt`` ...); in a Lightning root, its ``*.ckpt`` files (``epoch=3-step=400.ckpt``)
with ``last.ckpt`` newest. Which framework wrote the root (resurrect.checkpoint.frameworks)
decides what else is read: Megatron's ``latest_checkpointed_iteration.txt`` and DeepSpeed's
``latest`` name the checkpoint the job will load (a *pointer*); checkpoints newer than the
pointer were never confirmed complete. A Lightning ``last.ckpt`` that is a symlink is read
as a link (its text, never followed).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from resurrect.checkpoint.frameworks import (
    DEEPSPEED_LATEST,
    HF_TRAINER_STATE,
    MEGATRON_TRACKER,
    Framework,
    detect,
    is_lightning_last,
    lightning_order,
    pointer_family,
)
from resurrect.checkpoint.fsutil import (
    NotRegularFile,
    describe_oserror,
    lexists,
    open_parent,
    read_capped,
    scandir_names,
)

QUARANTINE_DIR = ".resurrect-quarantine"
TRACKER_NAME = MEGATRON_TRACKER
DAMAGE_MARKER_SUFFIX = ".resurrect-damaged"
#: Megatron writes one integer or "release"; anything bigger is not a tracker.
MAX_TRACKER_BYTES = 4096

_NAME_RE = re.compile(
    r"^(?:global[_-]?step|step|iter(?:ation)?|checkpoint|ckpt|epoch|save)[_-]?(?P<step>[0-9]+)"
    r"(?P<ext>\.(?:pt|pth|ckpt|bin|safetensors|distcp))?"
    r"(?P<partial>\.(?:tmp|partial|incomplete|inprogress))?$",
    re.IGNORECASE,
)

Kind = Literal["dir", "file", "missing", "unreadable"]
#: ``last``: Lightning's ``last.ckpt`` as a real file, the newest checkpoint by definition.
Role = Literal["checkpoint", "last"]


@dataclass(frozen=True)
class Candidate:
    """One checkpoint found under the root (or named by the tracker but absent)."""

    path: Path
    step: int | None
    kind: Kind
    partial_name: bool = False
    detail: str = ""
    tracked: bool = False  # a pointer file (tracker, ``latest``) names this one
    beyond_tracker: bool = False  # newer than the pointer: its save was never confirmed
    confirmed: bool = False  # at or below the pointer, so its save completed
    role: Role = "checkpoint"

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class Tracker:
    """A pointer file: Megatron's ``latest_checkpointed_iteration.txt`` or DeepSpeed's
    ``latest`` (its ``tag``, the folder name it names)."""

    path: Path
    iteration: int | None  # None: "release", unparseable, or a tag that is not a step
    release: bool
    raw: str
    kind: Literal["megatron", "deepspeed"] = "megatron"
    family: str = "iter"  # the name prefix of the checkpoints it counts in
    tag: str | None = None  # DeepSpeed: the folder name it names

    def target_name(self, step: int) -> str:
        """The folder name this pointer's framework gives the checkpoint at ``step``."""
        if self.family == "global_step":
            return f"global_step{step}"
        return megatron_iter_name(step)

    def text_for(self, name: str, step: int) -> str:
        """What the pointer must say to name the checkpoint ``name`` at ``step``."""
        return name if self.kind == "deepspeed" else f"{step}\n"


@dataclass(frozen=True)
class LastLink:
    """Lightning's ``last.ckpt`` when it is a symlink: ``target`` is the checkpoint of the
    root it names, None when the link leaves the root (then it is never touched)."""

    path: Path
    raw: str
    target: str | None


@dataclass
class Layout:
    """Everything discovery found under a root."""

    root: Path
    candidates: list[Candidate] = field(default_factory=list)
    tracker: Tracker | None = None  # Megatron's
    problems: list[str] = field(default_factory=list)
    framework: Framework = "generic"
    latest_tag: Tracker | None = None  # DeepSpeed's ``latest``
    last_links: list[LastLink] = field(default_factory=list)  # Lightning

    @property
    def pointers(self) -> list[Tracker]:
        """The pointer files of the root (Megatron-DeepSpeed writes both)."""
        return [p for p in (self.tracker, self.latest_tag) if p is not None]


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


def _read_pointer(path: Path) -> str | None:
    """The text of a pointer file (a tracker, DeepSpeed's ``latest``), None when there is
    none. Raises OSError if unreadable, a symlink, not a regular file or bigger than
    MAX_TRACKER_BYTES."""
    try:
        return read_capped(path, MAX_TRACKER_BYTES).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None


def read_tracker(root: Path, family: str = "iter") -> Tracker | None:
    """Megatron's tracker file, or None when there is none. Raises OSError if unreadable,
    a symlink, not a regular file or bigger than MAX_TRACKER_BYTES."""
    path = root / TRACKER_NAME
    raw = _read_pointer(path)
    if raw is None:
        return None
    text = raw.strip()
    if text == "release":
        return Tracker(path, None, True, raw, family=family)
    try:
        return Tracker(path, int(text), False, raw, family=family)
    except ValueError:
        return Tracker(path, None, False, raw, family=family)


def read_latest_tag(root: Path) -> Tracker | None:
    """DeepSpeed's ``latest`` file (the tag of the checkpoint it loads), or None when there
    is none. Raises OSError as :func:`read_tracker` does."""
    path = root / DEEPSPEED_LATEST
    raw = _read_pointer(path)
    if raw is None:
        return None
    tag = raw.strip()
    match = re.fullmatch(r"global_step([0-9]+)", tag)
    step = int(match[1]) if match else None
    return Tracker(path, step, False, raw, kind="deepspeed", family="global_step", tag=tag)


def _kind_of(path: Path, st: os.stat_result) -> tuple[Kind, str]:
    if stat.S_ISDIR(st.st_mode):
        return "dir", ""
    if stat.S_ISREG(st.st_mode):
        return "file", ""
    if stat.S_ISLNK(st.st_mode):
        return "unreadable", "symlink (not followed)"
    return "unreadable", describe_oserror(NotRegularFile(path, st.st_mode))


def read_link_name(path: Path) -> str:
    """The text of the symlink ``path`` (reached without symlinks; never followed)."""
    parent, name = open_parent(path)
    try:
        return os.readlink(name, dir_fd=parent)
    finally:
        os.close(parent)


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

    framework = detect((name, st.st_mode) for name, st in entries)
    layout = Layout(root, framework=framework)
    _read_pointers(layout, [n for n, st in entries if stat.S_ISDIR(st.st_mode)])
    if framework == "lightning":
        layout.candidates = _lightning_candidates(layout, entries)
        return layout

    pointers = [p for p in layout.pointers if p.iteration is not None]
    found: list[Candidate] = []
    for name, st in entries:
        parsed = parse_step(name)
        if parsed is None or name.endswith(DAMAGE_MARKER_SUFFIX):
            continue
        step, partial, _ext = parsed
        path = root / name
        kind, detail = _kind_of(path, st)
        counted = [p for p in pointers if name.lower().startswith(p.family)]
        found.append(
            Candidate(
                path=path,
                step=step,
                kind=kind,
                partial_name=partial,
                detail=detail,
                tracked=any(step == p.iteration for p in counted),
                beyond_tracker=any(step > (p.iteration or 0) for p in counted),
                confirmed=any(step <= (p.iteration or 0) for p in counted)
                or _trainer_saved(framework, path, kind),
            )
        )
    for pointer in layout.pointers:
        _add_missing_target(pointer, root, found)
    found.sort(key=lambda c: (c.step if c.step is not None else -1, c.kind != "missing", c.name))
    layout.candidates = found
    return layout


def _trainer_saved(framework: Framework, path: Path, kind: Kind) -> bool:
    """Hugging Face Trainer writes ``trainer_state.json`` last: with it, the save ended."""
    return framework == "hf_trainer" and kind == "dir" and lexists(path / HF_TRAINER_STATE)


def _read_pointers(layout: Layout, child_dirs: list[str]) -> None:
    """Read the root's pointer files into ``layout`` (problems noted, never raised)."""
    family = pointer_family("megatron", child_dirs) or "iter"
    try:
        layout.tracker = read_tracker(layout.root, family)
    except OSError as exc:
        layout.problems.append(f"{TRACKER_NAME} unreadable ({describe_oserror(exc)})")
    tracker = layout.tracker
    if tracker is not None and tracker.iteration is None and not tracker.release:
        layout.problems.append(f"{TRACKER_NAME} garbled: {tracker.raw.strip()[:40]!r}")
    if layout.framework not in ("deepspeed", "megatron"):
        return
    try:
        layout.latest_tag = read_latest_tag(layout.root)
    except OSError as exc:
        layout.problems.append(f"{DEEPSPEED_LATEST} unreadable ({describe_oserror(exc)})")
    latest = layout.latest_tag
    if latest is not None and latest.iteration is None:
        layout.problems.append(
            f"{DEEPSPEED_LATEST} names {latest.raw.strip()[:40]!r}, not a global_stepN folder: "
            "left as it is"
        )


def _add_missing_target(pointer: Tracker, root: Path, found: list[Candidate]) -> None:
    """A candidate for what ``pointer`` names when no folder of that name exists."""
    name = pointer.path.name
    if pointer.release:
        release = root / "release"
        if not lexists(release):
            found.append(Candidate(release, None, "missing", detail="tracker says release"))
        return
    step = pointer.iteration
    if step is None:
        return
    counted = [c for c in found if c.name.lower().startswith(pointer.family)]
    if any(c.step == step for c in counted):
        return
    target = pointer.target_name(step)
    if any(c.name == target for c in found):
        return
    what = "iteration" if pointer.kind == "megatron" else "checkpoint"
    found.append(
        Candidate(
            root / target,
            step,
            "missing",
            detail=f"{name} points at missing {what} {step}",
            tracked=True,
        )
    )


def _lightning_candidates(
    layout: Layout, entries: list[tuple[str, os.stat_result]]
) -> list[Candidate]:
    """A Lightning root's ``*.ckpt`` checkpoints, oldest first, ``last.ckpt`` files last
    (newest, as ModelCheckpoint writes them after the others); ``last.ckpt`` symlinks go to
    ``layout.last_links``."""
    keyed: list[tuple[tuple[int, int, int, float, str], Candidate]] = []
    for name, st in entries:
        if not name.endswith(".ckpt") and parse_step(name) is None:
            continue
        if name.endswith(DAMAGE_MARKER_SUFFIX):
            continue
        path = layout.root / name
        last = is_lightning_last(name)
        if last and stat.S_ISLNK(st.st_mode):
            layout.last_links.append(_last_link(layout, path))
            continue
        order = lightning_order(name)
        parsed = parse_step(name)
        if order is None and parsed is not None:
            order = (parsed[0], -1)
        step = order[0] if order is not None and order[0] >= 0 else None
        kind, detail = _kind_of(path, st)
        cand = Candidate(
            path=path,
            step=step,
            kind=kind,
            partial_name=parsed is not None and parsed[1],
            detail=detail,
            role="last" if last else "checkpoint",
        )
        step_key, epoch_key = order if order is not None else (-1, -1)
        keyed.append(((int(last), step_key, epoch_key, st.st_mtime, name), cand))
    keyed.sort(key=lambda kc: kc[0])
    return [cand for _key, cand in keyed]


def _last_link(layout: Layout, path: Path) -> LastLink:
    """Read a ``last.ckpt`` symlink: its target when it names a file of the root itself."""
    try:
        raw = read_link_name(path)
    except OSError as exc:
        layout.problems.append(f"{path.name} unreadable ({describe_oserror(exc)})")
        return LastLink(path, "", None)
    name = raw[2:] if raw.startswith("./") else raw
    if not name or "/" in name or name in (".", "..") or is_lightning_last(name):
        layout.problems.append(
            f"{path.name} links to {raw[:200]!r}, not a checkpoint file of this root: "
            "not followed, left as it is"
        )
        return LastLink(path, raw, None)
    return LastLink(path, raw, name)
