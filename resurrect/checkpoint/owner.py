"""Whose checkpoint directory this is, and whether resurrect may touch it at all.

A job names its own ``checkpoint_dir``, so the directory is only examined when it belongs
to the job's owner and no other user can change it under us (writable by others only
with the sticky bit). Everything inside is then reached from the root's directory fd
without following symlinks (resurrect.checkpoint.fsutil), and, when the service runs as
root, by a helper process running as the owner (resurrect.checkpoint.helper), so the
kernel enforces what the owner could do anyway.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from resurrect.checkpoint.fsutil import anchored, describe_oserror
from resurrect.checkpoint.layout import RootUnreadable


@dataclass(frozen=True)
class Owner:
    """A job's owner as the scheduler reports it."""

    uid: int
    gid: int


class RootRefused(RootUnreadable):
    """The root is not the job owner's to hand us: nothing is read or changed."""


def ownership_problem(st: os.stat_result, owner_uid: int | None) -> str | None:
    """Why a job-named directory with this stat is not the job owner's to hand us (owned by
    another user, or writable by every user without the sticky bit), or None."""
    if owner_uid is not None and st.st_uid != owner_uid:
        return f"owned by uid {st.st_uid}, not by the job's owner (uid {owner_uid})"
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        return "writable by every user without the sticky bit"
    return None


def refusal(st: os.stat_result, owner: Owner | None) -> str | None:
    """Why a root with this fstat must not be touched for ``owner``, or None."""
    problem = ownership_problem(st, None if owner is None else owner.uid)
    return None if problem is None else f"{problem}: not verified, nothing changed"


@contextlib.contextmanager
def confined_root(root: Path, owner: Owner | None = None) -> Iterator[None]:
    """Open ``root`` once, refuse it if it is not ``owner``'s (RootRefused) or cannot be
    opened (RootUnreadable), and anchor every access below it to that open directory."""
    stack = contextlib.ExitStack()
    try:
        st = stack.enter_context(anchored(root))
    except OSError as exc:
        raise RootUnreadable(f"checkpoint root {root}: {describe_oserror(exc)}") from exc
    with stack:
        problem = refusal(st, owner)
        if problem is not None:
            raise RootRefused(f"checkpoint root {root}: {problem}")
        yield
