"""NCCL's RAS client: which ranks of a job's NCCL communicators are missing, dead, or behind.

Since NCCL 2.24 every NCCL process runs a RAS thread; together they keep a view of the whole
job, and any of them answers a client on ``localhost:28028`` (``NCCL_RAS_ADDR`` changes it).
The ``ncclras`` client that ships with NCCL prints that view; with ``-f json`` (newer NCCL)
as a document per communicator: its ``ranks`` (host IP, pid, CUDA and NVML device, status:
``async_error``, ``abort_flag``, ..., and per-collective ``collective_counts``) and its
``missing_ranks`` (``unresponsive``, ``considered_dead``).

:func:`query_ras` runs the client (argv, bounded time and output) and says plainly when
there is nothing to ask: no ``ncclras`` on this node, no NCCL process with RAS listening
(a gloo job, NCCL < 2.24, ``NCCL_RAS_ENABLE=0``), or a client too old for JSON. Nothing is
made up then. :func:`parse_ras_json` turns the document into findings: missing ranks, ranks
with an NCCL error or an abort, and ranks whose count of some collective is behind the most
any rank reached (the rank the others wait for). The RAS threads live in the job's own
processes, so what they say is the job's word (``source="job_output"``): it names ranks for
people, it never drains a node by itself.

The port is a local TCP port any user may bind first. Before ``ncclras`` (run as root) is
pointed at it, :func:`listener_refusal` checks who listens there: every listening socket
on the port (``/proc/net/tcp`` and ``tcp6``, by inode) must be held by one of the probed
job's rank processes (their ``/proc/PID/fd``), else nothing is asked and the note says who
holds it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from resurrect.contracts import Evidence, SignalKind
from resurrect.numbers import is_ascii_digits
from resurrect.rules.text import truncate

MAX_OUTPUT = 4 << 20
MAX_SOCKET_TABLE_LINES = 1 << 20  # /proc/net/tcp{,6} rows read at most
MAX_FDS_PER_PROCESS = 1 << 16
_LISTEN = "0A"
DEFAULT_RAS_PORT = 28028
_NOT_LISTENING = "Failed to connect to the NCCL RAS service"


@dataclass(frozen=True, slots=True)
class RasRank:
    communicator: str
    rank: int
    host: str  # an IP address as NCCL knows it
    pid: int
    why: str  # "missing (unresponsive)", "nccl error 3", "behind: AllReduce 812 of 813", ...


@dataclass(frozen=True, slots=True)
class RasReport:
    available: bool
    reason: str = ""  # why not, when not available
    nccl_version: str = ""
    communicators: int = 0
    findings: list[RasRank] = field(default_factory=list)

    def evidence(self, node: str | None) -> list[Evidence]:
        """Findings as diagnostic evidence (or one note saying RAS was not available)."""
        if not self.available:
            return [
                Evidence(
                    kind=SignalKind.STACK_DUMP,
                    text=f"NCCL RAS not available on {node or 'this node'}: {self.reason}",
                    rule="nccl_ras.unavailable",
                    host=node,
                    source="sensor",
                )
            ]
        if not self.findings:
            return [
                Evidence(
                    kind=SignalKind.STACK_DUMP,
                    text=f"NCCL RAS ({self.nccl_version}): {self.communicators} communicator(s),"
                    " every rank present, no errors, collective counts equal",
                    rule="nccl_ras.healthy",
                    host=node,
                    source="job_output",
                )
            ]
        return [
            Evidence(
                kind=SignalKind.STACK_DUMP,
                text=truncate(
                    f"NCCL RAS: rank {f.rank} of communicator {f.communicator}"
                    f" (host {f.host}, pid {f.pid}): {f.why}"
                ),
                rule="nccl_ras.rank",
                rank=f.rank,
                fields={"communicator": f.communicator, "ip": f.host, "pid": str(f.pid)},
                source="job_output",
            )
            for f in self.findings[:64]
        ]


def _int(value: object, default: int = -1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _dict(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _dicts(value: object) -> list[dict[str, object]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _counts(rank: dict[str, object]) -> dict[str, int]:
    ops = _dict(rank.get("collective_counts"))
    return {str(op): n for op, n in ops.items() if isinstance(n, int)}


def _found(name: str, item: dict[str, object], why: str) -> RasRank:
    host = str(item.get("host", "?"))[:64]
    return RasRank(name, _int(item.get("rank")), host, _int(item.get("pid")), why)


def _communicator_findings(comm: dict[str, object]) -> list[RasRank]:
    name = str(comm.get("hash", "?"))[:40]
    found: list[RasRank] = []
    for item in _dicts(comm.get("missing_ranks")):
        status = _dict(item.get("status"))
        if status.get("considered_dead") is True:
            state = "considered dead"
        elif status.get("unresponsive") is True:
            state = "unresponsive"
        else:
            state = "not answering"
        found.append(_found(name, item, f"missing ({state})"))
    ranks = _dicts(comm.get("ranks"))
    furthest: dict[str, int] = {}
    for rank in ranks:
        for op, n in _counts(rank).items():
            furthest[op] = max(furthest.get(op, 0), n)
    for rank in ranks:
        status = _dict(rank.get("status"))
        whys: list[str] = []
        if _int(status.get("async_error"), 0) != 0:
            whys.append(f"nccl error {_int(status.get('async_error'))}")
        if status.get("abort_flag") is True:
            whys.append("aborted")
        behind = [
            f"{op} {n} of {furthest[op]}" for op, n in _counts(rank).items() if n < furthest[op]
        ]
        if behind:
            whys.append("behind: " + ", ".join(behind))
        if whys:
            found.append(_found(name, rank, "; ".join(whys)))
    return found


def parse_ras_json(text: str) -> RasReport:
    """The findings of one ``ncclras -f json`` document (bounded; malformed: not available)."""
    try:
        document = json.loads(text[:MAX_OUTPUT])
    except (ValueError, RecursionError):
        return RasReport(False, "ncclras printed no JSON document")
    if not isinstance(document, dict) or not isinstance(document.get("communicators"), list):
        return RasReport(False, "ncclras printed JSON without communicators")
    comms = _dicts(document["communicators"])
    findings = [f for c in comms for f in _communicator_findings(c)]
    return RasReport(True, "", str(document.get("nccl_version", ""))[:40], len(comms), findings)


def port_listeners(port: int, proc: Path = Path("/proc")) -> dict[int, int]:
    """The listening TCP sockets (IPv4 and IPv6) on ``port`` here: inode -> owner uid."""
    found: dict[int, int] = {}
    for table in ("tcp", "tcp6"):
        try:
            with open(proc / "net" / table, encoding="ascii", errors="replace") as handle:
                for number, line in enumerate(handle):
                    if number > MAX_SOCKET_TABLE_LINES:
                        break
                    fields = line.split()
                    if len(fields) < 10 or fields[3] != _LISTEN or ":" not in fields[1]:
                        continue
                    if int(fields[1].rpartition(":")[2], 16) == port and is_ascii_digits(fields[9]):
                        found[int(fields[9])] = int(fields[7]) if is_ascii_digits(fields[7]) else -1
        except (OSError, ValueError):
            continue
    return found


def socket_inodes(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """The inodes of the sockets process ``pid`` holds open (bounded; empty if gone)."""
    inodes: set[int] = set()
    fd_dir = proc / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)[:MAX_FDS_PER_PROCESS]
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]") and is_ascii_digits(target[8:-1]):
            inodes.add(int(target[8:-1]))
    return inodes


def listener_refusal(port: int, pids: Collection[int], proc: Path = Path("/proc")) -> str | None:
    """Why ``ncclras`` must not be pointed at ``port`` (None: every listener there is a
    socket one of ``pids``, the probed job's ranks, holds)."""
    listeners = port_listeners(port, proc)
    if not listeners:
        return (
            f"no NCCL process with RAS listens on port {port} here (a gloo job, NCCL < 2.24,"
            " or NCCL_RAS_ENABLE=0)"
        )
    held: set[int] = set()
    for pid in pids:
        held |= socket_inodes(pid, proc) & listeners.keys()
        if held == listeners.keys():
            return None
    strangers = sorted({uid for inode, uid in listeners.items() if inode not in held})
    return (
        f"port {port} here is held by a process that is not a rank of this job (uid"
        f" {', '.join(map(str, strangers))}): not asked (any local user may bind it first)"
    )


def query_ras(
    *,
    pids: Collection[int],
    port: int = DEFAULT_RAS_PORT,
    timeout_s: float = 10.0,
    binary: str | None = None,
    proc: Path = Path("/proc"),
) -> RasReport:
    """Ask the NCCL RAS service on this node (``ncclras -f json``), within ``timeout_s``,
    only when every listener on ``port`` is held by one of ``pids`` (the job's ranks)."""
    found = binary or shutil.which("ncclras")
    if found is None:
        return RasReport(
            False, "ncclras is not installed on this node (it ships with NCCL >= 2.24)"
        )
    refusal = listener_refusal(port, pids, proc)
    if refusal is not None:
        return RasReport(False, refusal)
    wait = max(1, int(timeout_s) - 2)
    argv = [found, "-f", "json", "-p", str(port), "-t", str(wait)]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return RasReport(False, f"ncclras did not answer within {timeout_s:.0f} s")
    except OSError as exc:
        return RasReport(False, f"cannot run ncclras: {exc}")
    err = done.stderr[:4096].decode("utf-8", "replace")
    if done.returncode != 0:
        if _NOT_LISTENING in err:
            return RasReport(
                False,
                f"no NCCL process with RAS listens on port {port} here (a gloo job, NCCL < 2.24,"
                " or NCCL_RAS_ENABLE=0)",
            )
        if "Invalid" in err or "usage" in err.lower():
            return RasReport(False, "this ncclras has no JSON output (-f json): NCCL too old")
        last = err.strip().splitlines()[-1:] or ["no message"]
        return RasReport(False, f"ncclras exit {done.returncode}: {last[0][:200]}")
    return parse_ras_json(done.stdout[:MAX_OUTPUT].decode("utf-8", "replace"))
