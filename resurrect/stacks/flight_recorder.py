"""PyTorch Flight Recorder dumps: the last collective each rank entered.

With ``TORCH_NCCL_TRACE_BUFFER_SIZE`` set, ProcessGroupNCCL keeps a ring of recent
collectives per rank and dumps it on a watchdog timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``) to
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank (default prefix ``/tmp/nccl_trace_rank_``).
Each entry carries ``pg_id``, ``collective_seq_id``, ``profiling_name`` and ``state``
(``scheduled``, ``started``, ``completed``). A rank whose last collective sequence number in a
process group is behind its peers' never entered the collective they wait in: the culprit.

Dump files are job-owned, so hostile. They are never parsed here: :func:`read_flight_record`
hands each to the parse helper (:func:`resurrect.untrusted.runner.run_parse`), which runs as
the dump's owner under CPU, memory and wall-clock limits and reads it as
:mod:`resurrect.stacks.flight_recorder_dump` says (a regular file of the rank's owner, no
symlink followed, bounded; JSON, or PyTorch's default pickle as plain data with string keys
only). What the helper answers is checked again here (it ran as the job's owner). A dump
that is refused, or a helper that fails or overruns, is a note
(:class:`~resurrect.errors.JobFileRefused`), never a stall of the caller.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from resurrect.contracts import Evidence, SignalKind
from resurrect.errors import JobFileRefused
from resurrect.rules.text import truncate
from resurrect.stacks.flight_recorder_dump import (
    MAX_COLLECTIVES_PER_RANK,
    MAX_DUMP_BYTES,
    MAX_FIELD_CHARS,
)
from resurrect.stacks.processes import (
    RankProcess,
    process_gid,
    process_started_at,
    process_uid,
)
from resurrect.untrusted.runner import ParseLimits, run_parse

__all__ = ["MAX_COLLECTIVES_PER_RANK", "MAX_DUMP_BYTES", "LastCollective", "read_flight_record"]

DEFAULT_DUMP_PREFIX = "/tmp/nccl_trace_rank_"  # PyTorch's TORCH_NCCL_DEBUG_INFO_TEMP_FILE
NO_GROUP = 65534  # the gid a helper drops to when the owner's group is unknown
#: One dump's parse: about a second for the largest honest dump, 10 s of wall clock at most.
DUMP_PARSE_LIMITS = ParseLimits(wall_s=10.0, cpu_s=5, memory_bytes=1 << 30, output_bytes=64 << 10)


@dataclass(frozen=True, slots=True)
class LastCollective:
    rank: int
    pg_id: str
    seq: int
    name: str
    state: str


@dataclass(frozen=True, slots=True)
class _Owner:
    uid: int
    gid: int


def _owner(uid: int, gid: int | None) -> _Owner:
    if gid is None:
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = NO_GROUP
    return _Owner(uid, gid)


def _collective(rank: int, item: object) -> LastCollective | None:
    """One entry of the helper's answer, checked (the helper ran as the job's owner)."""
    if not isinstance(item, list) or len(item) != 4:
        return None
    pg, seq, name, state = item
    if not (isinstance(pg, str) and isinstance(name, str) and isinstance(state, str)):
        return None
    if not isinstance(seq, int) or isinstance(seq, bool) or not 0 < seq < 1 << 63:
        return None
    return LastCollective(rank, pg[:MAX_FIELD_CHARS], seq, name[:MAX_FIELD_CHARS], state[:20])


def read_flight_record(
    path: Path,
    rank: int,
    owner_uid: int | None = None,
    *,
    owner_gid: int | None = None,
    max_bytes: int = MAX_DUMP_BYTES,
    limits: ParseLimits = DUMP_PARSE_LIMITS,
) -> list[LastCollective]:
    """Per process group, the last collective this rank recorded, parsed by the helper as
    ``owner_uid`` (the file must be theirs); without an owner, as the file's own owner.

    Raises :class:`JobFileRefused` (the note) for anything not read, ``OSError`` when the
    file cannot be opened (none there ...)."""
    if owner_uid is None:
        st = os.stat(path, follow_symlinks=False)
        parse_as, check_uid = _owner(st.st_uid, st.st_gid), None
    else:
        parse_as, check_uid = _owner(owner_uid, owner_gid), owner_uid
    args: dict[str, object] = {"path": str(path), "owner_uid": check_uid, "max_bytes": max_bytes}
    reply = run_parse("flight_recorder", args, parse_as, limits)
    found = reply.get("result")
    if not isinstance(found, list):
        raise JobFileRefused(f"{path}: the parse helper sent no collectives: not read")
    records = [c for c in (_collective(rank, item) for item in found) if c is not None]
    return sorted(records, key=lambda c: c.pg_id)[:MAX_COLLECTIVES_PER_RANK]


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
        gid = process_gid(process.pid, proc)
        return RankFlightRecord(tuple(read_flight_record(path, process.rank, uid, owner_gid=gid)))
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
