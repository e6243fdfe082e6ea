"""Filesystem helpers that turn OS errors into readable reasons instead of crashes."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: File name endings that mark a file as still being written.
PARTIAL_SUFFIXES: tuple[str, ...] = (".tmp", ".partial", ".incomplete", ".inprogress")


def describe_oserror(exc: OSError) -> str:
    """A short reason for an OS error: 'permission denied', 'symlink loop', ..."""
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ENOENT:
        return "missing"
    if exc.errno == errno.ENOTDIR:
        return "not a directory"
    return exc.strerror or type(exc).__name__


def is_partial_name(name: str) -> bool:
    """True for names like ``x.tmp``, ``shard.partial``, ``.tmp_x``."""
    lowered = name.lower()
    return lowered.endswith(PARTIAL_SUFFIXES) or lowered.startswith((".tmp", "tmp."))


@dataclass(frozen=True)
class FileEntry:
    """A regular file found inside a checkpoint directory."""

    path: Path
    rel: str
    size: int
    mtime: float


@dataclass
class Listing:
    """The regular files of a checkpoint directory and what could not be read."""

    files: list[FileEntry]
    errors: list[str]


def list_files(top: Path) -> Listing:
    """All regular files under ``top`` (following file symlinks, not directory symlinks).

    Unreadable entries and symlink loops become errors, never exceptions.
    """
    files: list[FileEntry] = []
    errors: list[str] = []
    stack: list[Path] = [top]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError as exc:
            errors.append(f"{_rel(current, top)}: cannot list ({describe_oserror(exc)})")
            continue
        for entry in entries:
            path = Path(entry.path)
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(path)
                    continue
                st = os.stat(path)
            except OSError as exc:
                errors.append(f"{_rel(path, top)}: {describe_oserror(exc)}")
                continue
            if stat.S_ISREG(st.st_mode):
                files.append(FileEntry(path, _rel(path, top), st.st_size, st.st_mtime))
            elif stat.S_ISDIR(st.st_mode):
                # A symlink to a directory: not followed (it could loop), but not an error.
                continue
    files.sort(key=lambda f: f.rel)
    return Listing(files, errors)


def _rel(path: Path, top: Path) -> str:
    try:
        rel = path.relative_to(top).as_posix()
    except ValueError:
        return str(path)
    return rel or "."


def iter_chunks(path: Path, start: int, length: int, block: int = 8 << 20) -> Iterator[bytes]:
    """Read ``length`` bytes of ``path`` from ``start`` in blocks (short read: stops early)."""
    with open(path, "rb", buffering=0) as fh:
        fh.seek(start)
        left = length
        while left > 0:
            data = fh.read(min(block, left))
            if not data:
                return
            left -= len(data)
            yield data
