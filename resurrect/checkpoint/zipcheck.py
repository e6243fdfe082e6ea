"""Integrity of ``torch.save`` archives (zip files), whole files or byte ranges of a file.

``quick`` reads only the zip structure: the end-of-central-directory record, the central
directory and each member's local header, and checks that every member's data lies inside
the archive. ``full`` additionally reads every member and checks its CRC-32, never
inflating more than the limits allow (resurrect.checkpoint.limits): a member that claims a
compression ratio above the limit is damage before a byte is inflated, and inflated bytes
are counted per archive while they stream.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from resurrect.checkpoint.findings import CheckLimited
from resurrect.checkpoint.fsutil import open_regular
from resurrect.checkpoint.limits import DEFAULT_LIMITS, VerifyLimits

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_LOCAL_SIG = b"PK\x03\x04"
_PICKLE_PROTO = 0x80
_READ_BLOCK = 8 << 20


class ZipDamage(Exception):
    """The archive is damaged; the message says how."""


class Window(io.RawIOBase):
    """A read-only, seekable view of ``length`` bytes of ``fh`` starting at ``offset``."""

    def __init__(self, fh: BinaryIO, offset: int, length: int) -> None:
        super().__init__()
        self._fh = fh
        self._start = offset
        self._length = length
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            new = pos
        elif whence == os.SEEK_CUR:
            new = self._pos + pos
        else:
            new = self._length + pos
        if new < 0:
            raise OSError("negative seek position")
        self._pos = new
        return new

    def read(self, size: int | None = -1) -> bytes:
        left = max(0, self._length - self._pos)
        n = left if size is None or size < 0 else min(size, left)
        if n == 0:
            return b""
        self._fh.seek(self._start + self._pos)
        data = self._fh.read(n)
        self._pos += len(data)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def check_archive(
    path: Path,
    *,
    offset: int = 0,
    length: int | None = None,
    full: bool = False,
    on_bytes: Callable[[int], None] | None = None,
    limits: VerifyLimits = DEFAULT_LIMITS,
) -> str:
    """Check the torch.save archive at ``path`` (or its byte range); return what was checked.

    Raises :class:`ZipDamage` with the reason when the archive is damaged, CheckLimited
    when a full check stopped at a bound. Legacy
    (pre-zip, plain pickle) torch.save files are recognised and reported as such.
    """
    with open_regular(path) as fh:
        if length is None:
            length = os.fstat(fh.fileno()).st_size - offset
        if length <= 0:
            raise ZipDamage("zero-byte archive")
        window = Window(fh, offset, length)
        head = window.read(4)
        if head[:1] == bytes([_PICKLE_PROTO]):
            return "legacy torch.save format (pickle, not zip): size only"
        if head != _LOCAL_SIG:
            raise ZipDamage("not a zip archive (bad signature)")
        try:
            archive = zipfile.ZipFile(window)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise ZipDamage(f"zip structure unreadable ({exc})") from exc
        with archive:
            _check_layout(archive, window)
            if full:
                _check_crcs(archive, on_bytes, limits)
                return "zip CRC-32"
    return "zip structure"


def _check_layout(archive: zipfile.ZipFile, window: Window) -> None:
    infos = archive.infolist()
    if not infos:
        raise ZipDamage("empty zip archive")
    if not any(i.filename.endswith("data.pkl") for i in infos):
        raise ZipDamage("zip archive has no data.pkl (not a torch.save archive)")
    limit: int = getattr(archive, "start_dir", window.seek(0, os.SEEK_END))
    for info in infos:
        window.seek(info.header_offset)
        raw = window.read(_LOCAL_HEADER.size)
        if len(raw) < _LOCAL_HEADER.size:
            raise ZipDamage(f"member {info.filename}: local header truncated")
        fields = _LOCAL_HEADER.unpack(raw)
        if fields[0] != _LOCAL_SIG:
            raise ZipDamage(f"member {info.filename}: bad local header")
        name_len, extra_len = fields[10], fields[11]
        end = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len + info.compress_size
        if end > limit:
            raise ZipDamage(f"member {info.filename}: data runs past the archive")


def _check_crcs(
    archive: zipfile.ZipFile, on_bytes: Callable[[int], None] | None, limits: VerifyLimits
) -> None:
    infos = archive.infolist()
    for info in infos:  # refuse bombs before inflating anything
        if info.compress_type == zipfile.ZIP_STORED:
            if info.file_size != info.compress_size:
                raise ZipDamage(f"member {info.filename}: stored sizes disagree")
        elif info.file_size > limits.max_compression_ratio * max(info.compress_size, 1):
            raise ZipDamage(
                f"member {info.filename}: compression ratio "
                f"{info.file_size / max(info.compress_size, 1):.0f}:1 exceeds "
                f"{limits.max_compression_ratio:.0f}:1 (zip bomb)"
            )
    inflated = 0
    for info in infos:
        compressed = info.compress_type != zipfile.ZIP_STORED
        if compressed and inflated + info.file_size > limits.max_inflated_bytes:
            raise CheckLimited(
                f"compressed members exceed {limits.max_inflated_bytes >> 20} MiB inflated"
            )
        read = 0
        try:
            with archive.open(info) as member:
                while True:
                    block = member.read(_READ_BLOCK)
                    if not block:
                        break
                    read += len(block)
                    if read > info.file_size:  # zipfile stops at the declared size; be sure
                        raise ZipDamage(f"member {info.filename}: more data than declared")
                    if on_bytes is not None:
                        on_bytes(len(block))
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise ZipDamage(f"member {info.filename}: {exc}") from exc
        if compressed:
            inflated += read
