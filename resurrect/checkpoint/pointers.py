"""Make the job's framework load the checkpoint prepare_resume chose.

* Megatron's ``latest_checkpointed_iteration.txt`` and DeepSpeed's ``latest`` are rewritten
  atomically to name it, their old text kept in a backup written as a fresh file (never
  through a planted name).
* Lightning's ``last.ckpt`` (``ckpt_path="last"``) becomes a relative symlink to it, as
  ModelCheckpoint's ``save_last="link"`` makes one: a new link renamed over the old link
  (a link is replaced, never followed), and only where no file is left at that name (a
  damaged ``last.ckpt`` file was moved to the quarantine first; one that could not be
  moved stays, and the note says so). A link that leaves the root is left alone.
* Hugging Face Trainer and torchtitan have no pointer: they load the highest
  ``checkpoint-N`` / ``step-N`` folder, so the quarantine (moving the damaged ones out of
  the root's listing) is what makes them resume from the chosen one.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from resurrect.checkpoint.atomic import atomic_write_text, removed_on_failure, write_new_then_rename
from resurrect.checkpoint.frameworks import LIGHTNING_LAST, lightning_order
from resurrect.checkpoint.fsutil import describe_oserror, lstat, open_parent
from resurrect.checkpoint.layout import Candidate, Layout, Tracker

#: Frameworks that load the highest step folder they find: a damaged checkpoint that
#: stays in the root (marked only, or left while its save may still run) may be loaded.
LOADS_HIGHEST_FOLDER = ("hf_trainer", "torchtitan")


def point_at(layout: Layout, best: Candidate, stamp: str, *, act: bool, actions: list[str]) -> None:
    """Make every pointer of ``layout`` name ``best`` (or say what would be done)."""
    for pointer in layout.pointers:
        _rewrite_pointer(pointer, best, stamp, act=act, actions=actions)
    if layout.framework == "lightning":
        _point_last(layout, best, act=act, actions=actions)


def warn_if_still_loaded(layout: Layout, still_in_root: list[str], actions: list[str]) -> None:
    """Say so when a framework without a pointer may still load a damaged checkpoint that
    stayed in the root (marked only, or left while its save may still run)."""
    if still_in_root and layout.framework in LOADS_HIGHEST_FOLDER:
        actions.append(
            f"{layout.framework} loads the highest step folder and ignores markers, so it may "
            f"load {', '.join(still_in_root)}: prepare the resume again once the job has "
            "stopped, or move the folder out of the root"
        )


def _rewrite_pointer(
    pointer: Tracker, best: Candidate, stamp: str, *, act: bool, actions: list[str]
) -> None:
    """Rewrite one pointer file to name ``best``, keeping a backup of the old text."""
    step = best.step
    name = pointer.path.name
    if step is None or not best.name.lower().startswith(pointer.family):
        return
    if pointer.iteration == step or (pointer.kind == "deepspeed" and pointer.iteration is None):
        return  # already right, or a custom DeepSpeed tag: left as it is (noted by discover)
    text = pointer.text_for(best.name, step)
    backup = pointer.path.with_name(f"{name}.resurrect-bak-{stamp}")
    if not act:
        actions.append(f"would set {name} to {text.strip()} (backup {backup.name})")
        return
    try:
        # The backup holds the text already read (capped, no symlink): a fresh file renamed
        # into place, so a planted name or symlink at the backup path is never written through.
        write_new_then_rename(backup, pointer.raw.encode("utf-8"))
        atomic_write_text(pointer.path, text)
    except OSError as exc:
        actions.append(f"could not rewrite {name} ({describe_oserror(exc)})")
        return
    actions.append(
        f"set {name} to {text.strip()} (was {pointer.raw.strip()!r}, backup {backup.name})"
    )


def _point_last(layout: Layout, best: Candidate, *, act: bool, actions: list[str]) -> None:
    """Make Lightning's ``last*.ckpt`` name ``best``."""
    if best.role == "last":
        return  # a real last.ckpt file is intact and newest: Lightning loads it
    lasts: dict[Path, str] = {}
    for link in layout.last_links:
        if link.target is not None and link.target != best.name:
            lasts[link.path] = f"link to {link.raw!r}"
    for cand in layout.candidates:
        if cand.role == "last":
            lasts[cand.path] = "damaged file"
    if not lasts and not layout.last_links:
        if lightning_order(best.name) is None:
            actions.append(f"no last.ckpt: resume with ckpt_path={best.name!r} or resume_path()")
        else:  # ModelCheckpoint's own naming: its save of last.ckpt did not end
            lasts[layout.root / LIGHTNING_LAST] = "absent"
    for path, was in sorted(lasts.items()):
        if not act:
            actions.append(f"would link {path.name} -> {best.name} (was {was})")
            continue
        try:
            _link_in_place(path, best.name)
        except _StillAFile:
            actions.append(
                f"left {path.name} in place (a file that could not be set aside): Lightning "
                f"would load it; ckpt_path={best.name!r} resumes from the intact one"
            )
            continue
        except OSError as exc:
            actions.append(f"could not link {path.name} ({describe_oserror(exc)})")
            continue
        actions.append(f"linked {path.name} -> {best.name} (was {was})")


class _StillAFile(Exception):
    """Something other than a symlink is at the link's name: it is never replaced."""


def _link_in_place(path: Path, target: str) -> None:
    """Atomically make ``path`` a symlink to ``target`` (a name beside it), if ``path`` is
    absent or a symlink; as root (an admin's CLI), the link is given the root's owner."""
    dir_fd, name = open_parent(path)
    try:
        try:
            st = lstat(path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISLNK(st.st_mode):
                raise _StillAFile(name)
        # The temporary name must not look like a Lightning "last" file.
        tmp = f".resurrect-link-{secrets.token_hex(6)}.tmp"
        os.symlink(target, tmp, dir_fd=dir_fd)
        with removed_on_failure(dir_fd, tmp):
            if os.geteuid() == 0:
                owner = os.fstat(dir_fd)
                os.chown(tmp, owner.st_uid, owner.st_gid, dir_fd=dir_fd, follow_symlinks=False)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
