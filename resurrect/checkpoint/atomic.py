"""Atomic file replacement inside a job's directory: a new temporary file (created
``O_EXCL|O_NOFOLLOW`` in the target's own directory, reached without symlinks), fsync, then
a rename within that directory fd. A symlink planted at the target name is replaced, never
followed; a planted temporary name makes the create fail, never write elsewhere."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from resurrect.checkpoint.fsutil import open_parent

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def removed_on_failure(dir_fd: int, tmp: str) -> Iterator[None]:
    """Remove the temporary entry ``tmp`` of ``dir_fd`` when the block fails (and re-raise):
    a failed replacement leaves no stray file behind."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new content, never half."""
    write_new_then_rename(path, text.encode("utf-8"))


def write_new_then_rename(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to a fresh temporary file beside ``path`` and rename it over ``path``."""
    dir_fd, name = open_parent(path)
    try:
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, _CREATE, mode, dir_fd=dir_fd)
        with removed_on_failure(dir_fd, tmp):
            try:
                os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
    finally:
        os.close(dir_fd)
