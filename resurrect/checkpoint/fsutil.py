"""Filesystem access inside job-owned checkpoint directories, and readable OS errors.

Everything here treats the directory as hostile: no symlink is followed, only regular files
are opened (without blocking on FIFOs), and reads are capped.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

#: File name endings that mark a file as still being written.
PARTIAL_SUFFIXES: tuple[str, ...] = (".tmp", ".partial", ".incomplete", ".inprogress")


def describe_oserror(exc: OSError) -> str:
    """A short reason for an OS error: 'permission denied', 'symlink loop', ..."""
    if exc.errno == errno.ELOOP:
        return "symlink (not followed) or symlink loop"
    if isinstance(exc, NotRegularFile | FileTooLarge) or exc.errno == errno.EXDEV:
        return exc.strerror or type(exc).__name__
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
    links: set[str] = field(default_factory=set)  # symlinks seen and not followed


def list_files(top: Path) -> Listing:
    """All regular files under ``top``. Symlinks are never followed: they are left out and
    named in ``links`` (a file the checkpoint needs that is a link then shows as missing),
    as are FIFOs, sockets and devices; unreadable directories are errors. Never raises."""
    files: list[FileEntry] = []
    errors: list[str] = []
    links: set[str] = set()
    stack: list[Path] = [top]
    while stack:
        current = stack.pop()
        try:
            entries = scandir_names(current)
        except OSError as exc:
            errors.append(f"{_rel(current, top)}: cannot list ({describe_oserror(exc)})")
            continue
        for name, st in entries:
            path = current / name
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
            elif stat.S_ISLNK(st.st_mode):
                links.add(_rel(path, top))
            elif stat.S_ISREG(st.st_mode):
                files.append(FileEntry(path, _rel(path, top), st.st_size, st.st_mtime))
    files.sort(key=lambda f: f.rel)
    return Listing(files, errors, links)


def _rel(path: Path, top: Path) -> str:
    try:
        rel = path.relative_to(top).as_posix()
    except ValueError:
        return str(path)
    return rel or "."


def iter_chunks(
    path: Path, start: int, length: int | None, block: int = 8 << 20
) -> Iterator[bytes]:
    """Read ``length`` bytes (None: up to the size the file had when opened) of ``path`` from
    ``start`` in blocks (short read: stops early)."""
    with open_regular(path) as fh:
        if length is None:
            length = os.fstat(fh.fileno()).st_size - start
        fh.seek(start)
        left = length
        while left > 0:
            data = fh.read(min(block, left))
            if not data:
                return
            left -= len(data)
            yield data


# ----------------------------------------------------------------------------- safe access
# Every open inside a checkpoint root walks from the root's directory fd one component at a
# time with O_NOFOLLOW: no symlink is followed, not even as a middle component. Files are
# opened O_NONBLOCK and fstat'ed, so a FIFO, socket or device is refused without blocking.
# The root itself is opened once (its own path may hold symlinks an admin made); the caller
# checks who owns it (resurrect.checkpoint.owner).

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
_ANCHOR: contextvars.ContextVar[tuple[Path, int] | None] = contextvars.ContextVar(
    "checkpoint_root_anchor", default=None
)


class NotRegularFile(OSError):
    """A path that must be a regular file is a FIFO, socket, device or directory."""

    def __init__(self, path: Path, mode: int) -> None:
        what = (
            "FIFO"
            if stat.S_ISFIFO(mode)
            else "socket"
            if stat.S_ISSOCK(mode)
            else "device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "directory"
            if stat.S_ISDIR(mode)
            else "special file"
        )
        super().__init__(errno.EINVAL, f"not a regular file ({what})", str(path))
        self.what = what


class FileTooLarge(OSError):
    """A file is larger than the cap for what it is."""

    def __init__(self, path: Path, size: int, cap: int) -> None:
        super().__init__(errno.EFBIG, f"too large ({size} bytes, cap {cap})", str(path))


@contextlib.contextmanager
def anchored(root: Path) -> Iterator[os.stat_result]:
    """Open ``root`` and make every safe-access call below it walk from that fd.

    Yields the root's fstat (for ownership checks). Raises OSError if it cannot be opened.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    token = _ANCHOR.set((Path(os.path.abspath(root)), fd))
    try:
        yield os.fstat(fd)
    finally:
        _ANCHOR.reset(token)
        os.close(fd)


def _split(path: Path) -> tuple[int | None, list[str]]:
    """(base dir fd or None for the current directory, components below it)."""
    absolute = Path(os.path.abspath(path))
    anchor = _ANCHOR.get()
    if anchor is not None:
        root, fd = anchor
        try:
            rel = absolute.relative_to(root)
        except ValueError:
            raise OSError(errno.EXDEV, "outside the checkpoint root", str(path)) from None
        return fd, [p for p in rel.parts if p not in ("", ".")]
    # No anchor (a training script calling resume_path itself): the parent is opened as
    # given, the last component without following.
    return None, [str(absolute.parent), absolute.name] if absolute.name else [str(absolute)]


def open_parent(path: Path) -> tuple[int, str]:
    """A new fd of ``path``'s parent directory (walked without symlinks) and its last name.

    The caller closes the fd."""
    base, parts = _split(path)
    if base is None:
        if len(parts) == 1:
            return os.open("/", _DIR_FLAGS), ""
        return os.open(parts[0], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), parts[1]
    fd = os.dup(base)
    if not parts:
        return fd, "."
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def open_dir(path: Path) -> int:
    """An fd of the directory ``path`` (no symlink anywhere below the root)."""
    parent, name = open_parent(path)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    finally:
        os.close(parent)


def lstat(path: Path) -> os.stat_result:
    """``os.lstat`` of ``path``, reached without following symlinks."""
    parent, name = open_parent(path)
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    finally:
        os.close(parent)


def lexists(path: Path) -> bool:
    """True when ``path`` exists (a symlink counts; it is not followed)."""
    try:
        lstat(path)
    except OSError:
        return False
    return True


def open_regular(path: Path, *, max_bytes: int | None = None) -> BinaryIO:
    """Open a regular file for reading: no symlinks, no FIFOs/devices/sockets (refused
    without blocking), optionally at most ``max_bytes`` big (FileTooLarge)."""
    parent, name = open_parent(path)
    try:
        fd = os.open(name, os.O_RDONLY | _FILE_FLAGS, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, st.st_mode)
        if max_bytes is not None and st.st_size > max_bytes:
            raise FileTooLarge(path, st.st_size, max_bytes)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: Path, max_bytes: int) -> bytes:
    """The whole content of a regular file of at most ``max_bytes`` (read once)."""
    with open_regular(path, max_bytes=max_bytes) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew while we read
        raise FileTooLarge(path, len(data), max_bytes)
    return data


def scandir_names(path: Path) -> list[tuple[str, os.stat_result]]:
    """The entries of a directory with their lstat, reached without following symlinks."""
    fd = open_dir(path)
    try:
        out: list[tuple[str, os.stat_result]] = []
        for name in os.listdir(fd):
            try:
                out.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
            except FileNotFoundError:
                continue  # removed while we listed
        return out
    finally:
        os.close(fd)


def first_names(path: Path, limit: int) -> list[str]:
    """At most ``limit`` entry names of the directory ``path`` (reached without following
    symlinks), in the directory's own order: a folder of millions costs ``limit``."""
    fd = open_dir(path)
    try:
        names: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                if len(names) >= limit:
                    break
                names.append(entry.name)
        return names
    finally:
        os.close(fd)
