"""PyTorch Flight Recorder dumps: the last collective each rank entered.

With ``TORCH_NCCL_TRACE_BUFFER_SIZE`` set, ProcessGroupNCCL keeps a ring of recent
collectives per rank and dumps it on a watchdog timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``) to
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank (default prefix ``/tmp/nccl_trace_rank_``).
Each entry carries ``pg_id``, ``collective_seq_id``, ``profiling_name`` and ``state``
(``scheduled``, ``started``, ``completed``). A rank whose last collective sequence number in a
process group is behind its peers' never entered the collective they wait in: the culprit.

Dump files are job-owned, so hostile: they are opened only as a regular file owned by the
rank process's owner, without following a symlink, bounded (:data:`MAX_DUMP_BYTES`). Both
forms are read: JSON, and PyTorch's default pickle through an unpickler that refuses every
global but PyTorch's container type tags (so only dicts, lists, strings and numbers can be
built: a crafted pickle runs nothing). Anything else is refused with
:class:`~resurrect.errors.JobFileRefused`, whose message is the note to show.
"""

from __future__ import annotations

import io
import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

from resurrect.contracts import Evidence, SignalKind
from resurrect.errors import JobFileRefused
from resurrect.log_reading import open_job_file
from resurrect.rules.text import truncate
from resurrect.stacks.processes import RankProcess, process_started_at, process_uid

MAX_DUMP_BYTES = 64 << 20
DEFAULT_DUMP_PREFIX = "/tmp/nccl_trace_rank_"  # PyTorch's TORCH_NCCL_DEBUG_INFO_TEMP_FILE
MAX_COLLECTIVES_PER_RANK = 64  # process groups, each with its last collective


@dataclass(frozen=True, slots=True)
class LastCollective:
    rank: int
    pg_id: str
    seq: int
    name: str
    state: str


def _same(value: object, *_: object) -> object:
    return value


# The only globals a dump may name: PyTorch's pickler tags containers with these, and each
# returns its first argument (``torch/jit/_pickle.py``). They map to resurrect's own
# function, so nothing of the job's choosing is ever called.
_PLAIN_DATA_TAGS = {
    ("torch.jit._pickle", name)
    for name in ("restore_type_tag", "build_intlist", "build_doublelist", "build_boollist")
}


class _NoGlobals(pickle.Unpickler):
    """An unpickler that builds plain data only: every class or function is refused (but
    PyTorch's container type tags, which it reads as the value they tag)."""

    def find_class(self, module: str, name: str) -> object:
        if (module, name) in _PLAIN_DATA_TAGS:
            return _same
        raise pickle.UnpicklingError(f"global {module[:80]}.{name[:80]} refused")


def _read_bounded(path: Path, owner_uid: int | None) -> bytes:
    fd = open_job_file(path, owner_uid)
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(handle.fileno()).st_size > MAX_DUMP_BYTES:
            raise JobFileRefused(f"{path} is larger than {MAX_DUMP_BYTES >> 20} MiB: not read")
        raw = handle.read(MAX_DUMP_BYTES + 1)
    if len(raw) > MAX_DUMP_BYTES:
        raise JobFileRefused(f"{path} is larger than {MAX_DUMP_BYTES >> 20} MiB: not read")
    return raw


def _decode(path: Path, raw: bytes) -> object:
    if raw.lstrip().startswith(b"{"):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise JobFileRefused(f"{path}: not valid JSON: not read") from None
    try:
        return _NoGlobals(io.BytesIO(raw)).load()
    except Exception as exc:  # any malformed or hostile pickle: a note, nothing built
        raise JobFileRefused(
            f"{path}: not a Flight Recorder dump of plain data ({type(exc).__name__}:"
            f" {str(exc)[:200]}): not read"
        ) from None


def read_flight_record(path: Path, rank: int, owner_uid: int | None = None) -> list[LastCollective]:
    """Per process group, the last collective this rank recorded.

    Raises :class:`JobFileRefused` (the note) for anything not read, ``OSError`` when the
    file cannot be opened (none there ...)."""
    document = _decode(path, _read_bounded(path, owner_uid))
    entries = document.get("entries") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise JobFileRefused(f"{path}: no Flight Recorder entries: not read")
    last: dict[str, LastCollective] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        seq = entry.get("collective_seq_id")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0:
            continue
        pg = str(entry.get("pg_id", "0"))[:200]
        if pg not in last or seq > last[pg].seq:
            last[pg] = LastCollective(
                rank, pg, seq, str(entry.get("profiling_name", ""))[:200],
                str(entry.get("state", ""))[:20],
            )  # fmt: skip
    return sorted(last.values(), key=lambda c: c.pg_id)[:MAX_COLLECTIVES_PER_RANK]


def lagging_ranks(records: list[LastCollective]) -> dict[str, list[int]]:
    """Per process group, the ranks whose last collective is behind the furthest rank's."""
    by_pg: dict[str, list[LastCollective]] = {}
    for record in records:
        by_pg.setdefault(record.pg_id, []).append(record)
    out: dict[str, list[int]] = {}
    for pg, group in by_pg.items():
        furthest = max(r.seq for r in group)
        behind = sorted(r.rank for r in group if r.seq < furthest)
        if behind:
            out[pg] = behind
    return out


@dataclass(frozen=True, slots=True)
class Behind:
    """A rank behind its peers in one process group: where it is, where they are."""

    rank: int
    pg_id: str
    seq: int
    peers_seq: int
    name: str  # the collective its peers wait in
    own_name: str  # the last collective this rank entered

    def describe(self) -> str:
        return (
            f"Flight Recorder: process group {self.pg_id}: last collective #{self.seq}"
            f" ({self.own_name or '?'}), its peers are at #{self.peers_seq}"
            f" ({self.name or '?'})"
        )


def behind_ranks(records: list[LastCollective]) -> list[Behind]:
    """Every rank behind its peers, per process group, with the collectives compared."""
    by_pg: dict[str, list[LastCollective]] = {}
    for record in records:
        by_pg.setdefault(record.pg_id, []).append(record)
    out: list[Behind] = []
    for pg, group in sorted(by_pg.items()):
        furthest = max(group, key=lambda r: r.seq)
        for r in sorted(group, key=lambda r: r.rank):
            if r.seq < furthest.seq:
                out.append(Behind(r.rank, pg, r.seq, furthest.seq, furthest.name, r.name))
    return out


def dump_path(prefix: str | None, rank: int) -> Path | None:
    """Where a rank's dump is: its ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` (or PyTorch's default)
    plus its rank; None for a prefix that is not an absolute path."""
    prefix = prefix or DEFAULT_DUMP_PREFIX
    if not prefix.startswith("/") or "\0" in prefix:
        return None
    return Path(f"{prefix}{rank}")


def flight_recorder_evidence(
    records: list[LastCollective], nodes: dict[int, str | None], notes: list[str]
) -> list[Evidence]:
    """The ranks behind their peers as diagnostic evidence (the job's own record), or one
    note saying why there is nothing to compare."""
    if not records:
        why = "; ".join(dict.fromkeys(notes)) or "no rank's dump was looked for"
        return [
            Evidence(
                kind=SignalKind.STACK_DUMP,
                text=truncate(f"Flight Recorder not available: {why}"),
                rule="flight_recorder.unavailable",
                source="sensor",
            )
        ]
    behind = behind_ranks(records)
    if not behind:
        ranks = len({r.rank for r in records})
        return [
            Evidence(
                kind=SignalKind.STACK_DUMP,
                text=f"Flight Recorder: {ranks} rank(s) read, every process group even",
                rule="flight_recorder.even",
                source="job_output",
            )
        ]
    return [
        Evidence(
            kind=SignalKind.STACK_DUMP,
            text=truncate(f"rank {b.rank} on {nodes.get(b.rank)} is behind: {b.describe()}"),
            rule="flight_recorder.behind",
            host=nodes.get(b.rank),
            rank=b.rank,
            fields={
                "pg": b.pg_id,
                "seq": str(b.seq),
                "peers_seq": str(b.peers_seq),
                "collective": b.name,
                "own_collective": b.own_name,
            },
            source="job_output",
        )
        for b in behind[:64]
    ]


@dataclass(frozen=True, slots=True)
class RankFlightRecord:
    """What one rank's dump says (its last collectives), or why it says nothing (``note``)."""

    collectives: tuple[LastCollective, ...] = ()
    note: str = ""


def rank_flight_record(process: RankProcess, proc: Path = Path("/proc")) -> RankFlightRecord:
    """Read a rank process's Flight Recorder dump where its environment says it goes, as a
    file of the process's owner (a dump older than the process is an earlier run's)."""
    if process.rank is None:
        return RankFlightRecord(note=f"pid {process.pid}: no rank number")
    path = dump_path(process.flight_recorder_prefix, process.rank)
    if path is None:
        return RankFlightRecord(
            note=f"rank {process.rank}: its Flight Recorder dump path is not an absolute path"
        )
    uid = process_uid(process.pid, proc)
    if uid is None:
        return RankFlightRecord(note=f"rank {process.rank}: process gone")
    try:
        modified = os.stat(path, follow_symlinks=False).st_mtime
        started = process_started_at(process.pid, proc)
        if started is not None and modified < started - 1.0:
            return RankFlightRecord(note=f"{path} is older than rank {process.rank}: not read")
        return RankFlightRecord(tuple(read_flight_record(path, process.rank, uid)))
    except JobFileRefused as exc:
        return RankFlightRecord(note=str(exc))
    except FileNotFoundError:
        enabled = process.flight_recorder_buffer not in ("", "0")
        why = (
            "PyTorch writes it on a watchdog timeout"
            if enabled
            else "TORCH_FR_BUFFER_SIZE (TORCH_NCCL_TRACE_BUFFER_SIZE) is not set"
        )
        return RankFlightRecord(note=f"no dump at {path} ({why})")
    except OSError as exc:
        return RankFlightRecord(note=f"{path}: {exc.strerror or exc}")
