"""Key files: read only when nobody but their owner could have read or changed them.

A key file (the liveness master or node key, an operator's approval key, the hold-mark key,
the slurmrestd token) is accepted only if it is a regular file (no symlink is followed),
owned by the user running resurrect or by root, with no permission bits for group or others
(0600 or 0400), and holds at least :data:`MIN_KEY_BYTES` bytes (or what its reader asks).
Anything else is a :class:`ConfigError` that says what to change; a key someone else could
read lets them forge what it authenticates.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

from resurrect.errors import ConfigError

MIN_KEY_BYTES = 32
MAX_KEY_BYTES = 4096


def _check(st: os.stat_result, path: Path, what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{what} {path}: not a regular file")
    if st.st_uid not in (os.geteuid(), 0):
        raise ConfigError(
            f"{what} {path}: owned by uid {st.st_uid}, not by this user ({os.geteuid()}) or root"
        )
    if st.st_mode & 0o077:
        raise ConfigError(
            f"{what} {path}: mode {stat.S_IMODE(st.st_mode):04o} lets others read or change"
            f" it (chmod 600 {path})"
        )


def read_key(
    path: Path, what: str, *, min_bytes: int = MIN_KEY_BYTES, max_bytes: int = MAX_KEY_BYTES
) -> bytes:
    """The key in ``path`` (surrounding white space removed); ConfigError unless the file is
    private to its owner, owned by this user or root, and ``min_bytes`` to ``max_bytes``
    long. The error never holds any of the file's content."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror}") from exc
    try:
        _check(os.fstat(fd), path, what)
        key = os.read(fd, max_bytes + 1).strip()
    finally:
        os.close(fd)
    if len(key) < min_bytes:
        raise ConfigError(f"{what} {path}: shorter than {min_bytes} bytes")
    if len(key) > max_bytes:
        raise ConfigError(f"{what} {path}: longer than {max_bytes} bytes")
    return key


def read_or_create_key(path: Path, what: str) -> bytes:
    """The key in ``path``; a fresh random key (mode 0600) if there is no file yet. The new
    key is written whole to a file of its own and linked into place, so ``path`` never holds
    a part of one (a full disk leaves no file, and the next call tries again)."""
    if os.path.lexists(path):
        return read_key(path, what)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, staged = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot create: {exc.strerror}") from exc
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, secrets.token_hex(32).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(staged, path)  # fails if another process made it first: that key is read
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot create: {exc.strerror}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(staged)
    return read_key(path, what)
