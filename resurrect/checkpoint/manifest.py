"""The resurrect manifest: a list of a checkpoint's files with their sizes and sha256.

A training script calls :func:`write_manifest` after a save completes. Its presence marks the
save as complete; ``quick`` verification compares sizes, ``full`` also compares sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from resurrect.checkpoint.atomic import atomic_write_text
from resurrect.checkpoint.fsutil import (
    is_partial_name,
    iter_chunks,
    list_files,
    open_regular,
    read_capped,
)
from resurrect.errors import CheckpointError
from resurrect.numbers import is_ascii_digits

MANIFEST_NAME = "resurrect-manifest.json"
MANIFEST_VERSION = 1
#: A manifest of a million files is ~150 MB; anything bigger is not one.
MAX_MANIFEST_BYTES = 256 << 20
#: The manifest's head, which names its writer before the file list.
MAX_WRITER_BYTES = 4096
_WRITER = re.compile(
    rb'"writer":\s{0,64}\{\s{0,64}"job_id":\s{0,64}"(?P<job>[0-9]{1,12})",\s{0,64}'
    rb'"attempt":\s{0,64}(?P<attempt>[0-9]{1,9})\s{0,64}\}'
)


class ManifestError(CheckpointError):
    """The manifest is unreadable or malformed, or cannot be written."""


@dataclass(frozen=True)
class ManifestEntry:
    """One file of a checkpoint as the manifest records it."""

    path: str
    size: int
    sha256: str


def default_workers() -> int:
    """Threads for hashing: hashlib releases the GIL, so one per CPU (at most 16)."""
    return max(1, min(16, os.cpu_count() or 1))


def sha256_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    """The sha256 hex digest of a file, read in large blocks."""
    digest = hashlib.sha256()
    for block in iter_chunks(path, 0, None):
        digest.update(block)
        if on_bytes is not None:
            on_bytes(len(block))
    return digest.hexdigest()


def writer_from_environment(environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """(job id, attempt) of the Slurm job this process is part of, from its own labels
    (``SLURM_JOB_ID``, ``SLURM_RESTART_COUNT``); None outside a Slurm job."""
    env = os.environ if environ is None else environ
    job_id, attempt = env.get("SLURM_JOB_ID", ""), env.get("SLURM_RESTART_COUNT", "0")
    if not is_ascii_digits(job_id) or len(job_id) > 12:
        return None
    return job_id, int(attempt) if is_ascii_digits(attempt) and len(attempt) <= 9 else 0


def read_writer(ckpt_dir: Path) -> tuple[str, int] | None:
    """(job id, attempt) that ``write_manifest`` recorded as the checkpoint's writer (read
    from the manifest's first ``MAX_WRITER_BYTES``, where it is written); None if none."""
    with open_regular(ckpt_dir / MANIFEST_NAME) as manifest:
        head = manifest.read(MAX_WRITER_BYTES)
    m = _WRITER.search(head.partition(b'"files"')[0])
    return (m["job"].decode(), int(m["attempt"])) if m is not None else None


def write_manifest(
    ckpt_dir: Path | str,
    *,
    workers: int | None = None,
    writer: tuple[str, int] | None = None,
) -> Path:
    """Record every file under ``ckpt_dir`` (size and sha256) in ``resurrect-manifest.json``.

    Call it after the checkpoint is completely written (on one rank only). The manifest is
    written atomically, so its presence means the save finished. It names its writer, the
    job attempt (``writer``, by default this process's own Slurm labels): a checkpoint a
    fenced attempt wrote after its fence is never resumed from (resurrect.checkpoint.fenced).
    Raises ManifestError (a CheckpointError) if the directory cannot be read.
    """
    writer = writer or writer_from_environment()
    top = Path(ckpt_dir)
    listing = list_files(top)
    if listing.errors:
        raise ManifestError(f"cannot list {top}: {listing.errors[0]}")
    files = [
        f for f in listing.files if f.rel != MANIFEST_NAME and not is_partial_name(f.path.name)
    ]
    try:
        with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
            digests = list(pool.map(lambda f: sha256_file(f.path), files))
    except OSError as exc:
        raise ManifestError(f"cannot hash the files of {top}: {exc}") from exc
    doc: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "created_at": datetime.now(UTC).isoformat(),
        # before the file list: read_writer reads only the manifest's head
        **({"writer": {"job_id": writer[0], "attempt": writer[1]}} if writer else {}),
        "files": [
            {"path": f.rel, "size": f.size, "sha256": d}
            for f, d in zip(files, digests, strict=True)
        ],
    }
    target = top / MANIFEST_NAME
    atomic_write_text(target, json.dumps(doc, indent=1) + "\n")
    return target


def read_manifest(ckpt_dir: Path) -> list[ManifestEntry]:
    """Parse ``ckpt_dir/resurrect-manifest.json``; raise ManifestError if it is not sound."""
    try:
        doc = json.loads(read_capped(ckpt_dir / MANIFEST_NAME, MAX_MANIFEST_BYTES))
    except (OSError, ValueError, RecursionError) as exc:
        raise ManifestError(f"manifest unreadable ({str(exc)[:200]})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise ManifestError("manifest malformed (no file list)")
    entries: list[ManifestEntry] = []
    for item in doc["files"]:
        try:
            entry = ManifestEntry(str(item["path"]), int(item["size"]), str(item["sha256"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"manifest malformed entry {item!r}") from exc
        if os.path.isabs(entry.path) or ".." in Path(entry.path).parts or entry.size < 0:
            raise ManifestError(f"manifest has an invalid path or size: {entry.path!r}")
        entries.append(entry)
    return entries
