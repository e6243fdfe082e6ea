"""PyTorch Flight Recorder dumps: the last collective each rank entered.

With ``TORCH_NCCL_TRACE_BUFFER_SIZE`` set, ProcessGroupNCCL keeps a ring of recent
collectives per rank and dumps it on a watchdog timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``) to
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank. Only the JSON form is read here: the default
pickle form is never unpickled (dump files are job-owned, and a crafted pickle runs code).
Each entry carries ``pg_id``, ``collective_seq_id``, ``profiling_name`` and ``state``
(``scheduled``, ``started``, ``completed``). A rank whose last collective sequence number in a
process group is behind its peers' never entered the collective they wait in: the culprit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MAX_DUMP_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class LastCollective:
    rank: int
    pg_id: str
    seq: int
    name: str
    state: str


def read_flight_record(path: Path, rank: int) -> list[LastCollective]:
    """Per process group, the last collective this rank recorded (bounded, JSON only)."""
    with open(path, "rb") as handle:
        raw = handle.read(MAX_DUMP_BYTES + 1)
    if len(raw) > MAX_DUMP_BYTES or not raw.lstrip().startswith(b"{"):
        return []  # too large, or not JSON (a pickle): not read
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    entries = document.get("entries") if isinstance(document, dict) else None
    last: dict[str, LastCollective] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        seq = entry.get("collective_seq_id")
        if not isinstance(seq, int) or seq <= 0:
            continue
        pg = str(entry.get("pg_id", "0"))
        if pg not in last or seq > last[pg].seq:
            last[pg] = LastCollective(
                rank, pg, seq, str(entry.get("profiling_name", ""))[:200],
                str(entry.get("state", ""))[:20],
            )  # fmt: skip
    return sorted(last.values(), key=lambda c: c.pg_id)


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
