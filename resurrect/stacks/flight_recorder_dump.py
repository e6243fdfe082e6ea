"""Reading one Flight Recorder dump file: the last collective per process group.

This runs in the parse helper (:mod:`resurrect.untrusted.helper`), as the dump's owner,
under CPU, memory and wall-clock limits, never in the agent or the follower: the file is the
job's. It opens the file as a regular file without following a symlink, owned by the rank's
owner, reads at most :data:`MAX_DUMP_BYTES`, and decodes JSON (what
``_dump_fr_trace_json`` writes) or PyTorch's default pickle through
:func:`~resurrect.untrusted.plain_pickle.load_plain` (plain data, string dict keys only).
It imports nothing heavy, so the helper starts fast.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from resurrect.errors import JobFileRefused
from resurrect.log_reading import open_job_file
from resurrect.untrusted.plain_pickle import PlainPickleError, load_plain

MAX_DUMP_BYTES = 64 << 20
MAX_COLLECTIVES_PER_RANK = 64  # process groups, each with its last collective
MAX_FIELD_CHARS = 200

#: (process group, collective sequence number, profiling name, state)
Collective = tuple[str, int, str, str]


def read_bounded(path: str | Path, owner_uid: int | None, max_bytes: int) -> bytes:
    """The file's bytes, or :class:`JobFileRefused` when it is not one to read."""
    fd = open_job_file(path, owner_uid)
    too_large = f"{path} is larger than {max_bytes:,} bytes: not read"
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(handle.fileno()).st_size > max_bytes:
            raise JobFileRefused(too_large)
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise JobFileRefused(too_large)
    return raw


def decode(path: str | Path, raw: bytes) -> object:
    """The document in ``raw``: JSON when it looks like JSON, else a plain-data pickle."""
    if raw.lstrip()[:1] in (b"{", b"["):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise JobFileRefused(f"{path}: not valid JSON: not read") from None
    try:
        return load_plain(raw)
    except PlainPickleError as exc:
        raise JobFileRefused(
            f"{path}: not a Flight Recorder dump of plain data ({str(exc)[:200]}): not read"
        ) from None


def _text(value: object) -> str | None:
    """A short text field: a string or an integer (never a container's rendering)."""
    if isinstance(value, str):
        return value[:MAX_FIELD_CHARS]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if abs(value) < 10**18 else None
    return None


def last_collectives(path: str | Path, document: object) -> list[Collective]:
    """Per process group, the entry with the highest positive ``collective_seq_id``."""
    entries = document.get("entries") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise JobFileRefused(f"{path}: no Flight Recorder entries: not read")
    last: dict[str, Collective] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        seq = entry.get("collective_seq_id")
        if not isinstance(seq, int) or isinstance(seq, bool) or not 0 < seq < 1 << 63:
            continue
        pg = _text(entry.get("pg_id", "0"))
        if pg is None:
            continue
        if pg not in last and len(last) >= 4 * MAX_COLLECTIVES_PER_RANK:
            continue  # a dump with more process groups than any job has: enough of them
        if pg not in last or seq > last[pg][1]:
            name = _text(entry.get("profiling_name", "")) or ""
            state = (_text(entry.get("state", "")) or "")[:20]
            last[pg] = (pg, seq, name, state)
    return sorted(last.values())[:MAX_COLLECTIVES_PER_RANK]


def parse_dump(path: str | Path, raw: bytes) -> list[Collective]:
    """The last collectives of one dump's bytes; :class:`JobFileRefused` when not a dump."""
    return last_collectives(path, decode(path, raw))


def read_dump(
    path: str | Path, owner_uid: int | None, max_bytes: int = MAX_DUMP_BYTES
) -> list[Collective]:
    """The last collectives of the dump at ``path`` (a file of ``owner_uid``)."""
    return parse_dump(path, read_bounded(path, owner_uid, max_bytes))
