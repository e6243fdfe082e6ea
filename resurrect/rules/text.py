"""Turning raw log bytes into bounded, clean lines the rules can match safely.

Everything a rule sees has passed through here:

* **Bounded length.** A line is cut at :data:`MAX_LINE_BYTES` before it is decoded; the first
  part is kept, the rest is dropped. No regex ever runs over a multi-MiB line.
* **Decoding.** Invalid UTF-8 is decoded with replacement characters, never an error.
* **Cleaning.** ANSI escape sequences (colours, cursor moves) are removed, a trailing CR (CRLF
  files) is dropped, inner CRs (progress bars redrawing themselves) and NUL/control bytes become
  spaces.
* **Prefixes.** Launchers prepend where a line came from: ``[rank3]:`` (torchrun), ``3: ``
  (``srun -l``), ``[default0]:`` (torchrun ``--tee`` role prefix: a local rank, which a global
  rank on the same line, ``[default0]:[rank12]:``, outranks), ``host:pid:tid [dev]``
  (NCCL), ``[rank: 0]`` (Lightning), dmesg ``[ 12.345]`` and syslog ``Mon DD HH:MM:SS host
  kernel:`` stamps (also ``dmesg -T`` and remote ``host: kern: level: [time]:`` forms), bare
  timestamps that log collectors prepend, ``[1,3]<stderr>:`` (mpirun ``--tag-output``),
  ``[host:pid]`` (Open MPI's signal handler and runtime messages), ``[host:pid:thread:tid]``
  (UCX's signal handler),
  ``(Worker pid=12, ip=10.0.0.3)`` and ``(pid=12, ip=...)`` (Ray; the ip names the host),
  ``worker-1: `` / ``10.0.0.5: `` (pdsh, as DeepSpeed's multi-node launcher runs it; an Ascend
  error code such as ``EZ9999: `` is none) and
  ``> `` quoting; where mpirun interleaved two ranks' output, a ``[1,0]<stderr>:`` tag inside a
  line starts the second rank's text. :func:`split_prefixes` removes them and reports the
  rank/host (and NCCL's pid) they name, so rule patterns match the message body and need not
  know every launcher.
  Without a rank prefix, ProcessGroupNCCL's own ``[Rank 3]`` tag (default group), a formatter's
  ``[rank=3]``, JAX/Orbax's ``[process=3]`` (the process index) or torch_npu/CANN's
  ``(PID:12, Device:3, RankID:3)`` error header names the rank.

:class:`LineSplitter` is the streaming half: feed it arbitrary byte chunks (as read from a
growing file) and it yields complete, bounded lines, keeping a partial last line for the next
read and cutting an over-long line without buffering it whole.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass

from resurrect.loopback import is_loopback_host

MAX_LINE_BYTES = 16 * 1024
"""A line is cut to this many bytes before decoding and matching."""

MAX_EVIDENCE_CHARS = 4 * 1024
"""Evidence text is truncated to this many characters."""

_ANSI = re.compile(
    r"\x1b(?:\[[0-?]{0,32}[ -/]{0,8}[@-~]|\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)?|[@-Z\\-_])"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

# One anchored, bounded alternation of every launcher prefix, applied repeatedly (a line can
# carry several: "3: [rank3]:[E1206 ...]" from srun -l around torchrun).
_PREFIX = re.compile(
    # srun -l, its labels right-aligned to the widest task id ("  0: ", " 764: ")
    r"(?: {0,5}(?P<rank_a>[0-9]{1,6}): "
    # mpirun --tag-output "[1,3]<stderr>:", horovodrun's gloo launcher "[3]<stderr>:"
    r"|\[(?:[0-9]{1,6},)?(?P<rank_c>[0-9]{1,6})\]<std(?:out|err)>: ?"
    # a ctime stamp glued to such a tag (mpirun --timestamp-output, horovodrun):
    # "Thu Aug 29 16:41:02 2019[3]<stderr>:"
    r"|[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}"
    r"(?=\[[0-9,]{1,13}\]<std)"
    # docker compose's service column: "trainer_1  | " (a container, not a host)
    r"|[A-Za-z][\w.-]{0,62}[-_][0-9]{1,3}\s{1,32}\| "
    r"|\((?:[\w.-]{1,64} )?pid=[0-9]{1,10}(?:, ip=(?P<host_e>[0-9.]{7,15}))?\) "  # Ray worker
    r"|> ?"  # quoted (e-mail, markdown)
    r"|\[(?:rank|Rank |rank: ?)(?P<rank_b>[0-9]{1,6})\]:? ?"  # torchrun, lightning
    # torchrun --tee's role prefix "[default0]:" ("[{role}{local_rank}]"): a local rank
    r"|\[default(?P<local_rank>[0-9]{1,6})\]:? ?"
    # NCCL: "host:pid:tid [dev] "
    r"|(?P<host_a>[A-Za-z0-9][\w.-]{0,127}):(?P<pid_a>[0-9]{1,10}):[0-9]{1,10} \[[0-9]{1,3}\] "
    r"|\[ {0,12}[+]?[0-9]{1,10}\.[0-9]{1,9}\] ?"  # dmesg, also "dmesg -H" deltas
    # syslog: "Nov 29 19:00:00 host kernel: "
    r"|[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} "
    r"(?P<host_b>[A-Za-z0-9][\w.-]{0,127}) "
    r"(?:kernel|[\w.-]{1,64}(?:\[[0-9]{1,10}\])?): "
    # journald short-iso: "2025-01-01T10:00:00+0000 host kernel: "
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
    r"(?:Z|[+-][0-9]{2}:?[0-9]{2})? "
    r"(?P<host_c>[A-Za-z0-9][\w.-]{0,127}) kernel: "
    # remote syslog (Talos and similar): "10.0.0.9: kern: warning: [2026-04-22T21:30:51Z]: "
    r"|(?P<host_d>[A-Za-z0-9][\w.-]{0,127}): kern: \w{1,10}: \[[^\]\n]{1,40}\]: "
    # Open MPI's signal handler and runtime: "[host:pid] ", also indented by a reporter (a source
    # file is no host: "[api.py:12]")
    r"|[ \t]{0,8}\["
    r"(?![\w.-]{1,128}\.(?:py|pyx|cc|cpp|cxx|c|h|hpp|cu|cuh|rs|go|java|js|ts|lua|rb|sh):)"
    r"(?P<host_g>[A-Za-z][\w.-]{1,127}):[0-9]{1,10}\] "
    # UCX's signal handler: "[host:pid:thread:tid] ", also "[host:pid :0:tid] "; the host has a
    # letter (a clock such as "[12:30:45:123]" is none)
    r"|\[(?P<host_h>(?=[\w.-]{0,127}[A-Za-z])[A-Za-z0-9][\w.-]{0,127})"
    r":[0-9]{1,10} ?:[0-9]{1,4}(?::[0-9]{1,10})?\] "
    # dmesg -T: "[Wed Jan 27 23:04:35 2021] "
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9] [0-9]{4}\] ?"
    # a bare timestamp, as log collectors prepend: "2025-11-09 15:39:31.043 +08:00 ",
    # "2019-06-02T16:13:44.884Z: ", "[2025-11-09 07:39:30] "
    r"|\[?[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]{1,9})?)?"
    r"(?:Z| ?[+-][0-9]{2}:?[0-9]{2})?\]?:? "
    # slurmstepd naming its node in its own tag: "slurmstepd-gpu07: error: ..."
    r"|slurmstepd-(?P<host_i>[A-Za-z0-9][\w.-]{0,127}): "
    # pdsh (DeepSpeed's multi-node launcher) and clush: "worker-1: ", "10.0.0.5: ", "node017: ".
    # A host here has a digit; a dotted name ends in a letter label (not "libcuda.so.1",
    # "python3.10"); a plain word+number is no counter, tool or device ("epoch3", "python3",
    # "mlx5", "eth0", "enp94s0").
    r"|(?P<host_f>(?:[0-9]{1,3}\.){3}[0-9]{1,3}"
    # nor a Python exception's dotted name ("mpi4py.MPI.Exception: ", "h5py.x.OSError: ")
    r"|(?![\w.-]{0,200}(?:Error|Exception|Warning): )"
    r"(?=[A-Za-z][\w-]{0,62}[0-9])(?!(?i:rank|epoch|step|iter|layer|batch|stage|block|round|phase"
    r"|part|test|cuda|device|gpu|python|line|task|process|utf"
    r"|eth|ib|mlx|nvme|sd|bond|hsn|hfi|cxi|md|dm|veth|docker)[-_]?[0-9]{1,9}: "
    # nor an Ascend CANN error code ("EZ9999: Inner Error!", "EI0006: ...", "E39999: ...")
    r"|E[A-Z0-9][0-9]{4}: "
    r"|(?i:en[ops]|ib[ps])[0-9]\w{0,20}: )"
    r"[A-Za-z][A-Za-z0-9]{0,62}(?:-[A-Za-z0-9]{1,62}){0,8}"
    r"(?:\.[A-Za-z0-9-]{0,62}[A-Za-z][A-Za-z0-9-]{0,62}){0,8}): )"
)


# ProcessGroupNCCL tags its messages with the reporting rank: "[Rank 3]", or "[PG 0 Rank 3]" /
# "[PG ID 0 PG GUID 0(default_pg) Rank 3]" in the default group (another group's rank is not
# the global rank, so it names nobody).
_PG_RANK = re.compile(
    r"\[(?:PG (?:ID )?0 (?:PG GUID 0(?:\(default_pg\))? )?)?Rank (?P<rank>[0-9]{1,6})\]"
    # a log formatter's "[rank=0]" / "[rank: 0]" field; JAX/Orbax's "[process=1]" (process_index)
    r"|\[(?:rank|process)[=:] ?(?P<rank_kv>[0-9]{1,6})\]"
    # torch_npu / CANN's error header "(PID:927000, Device:3, RankID:3)" (RankID:-1: none)
    r"|\(PID:[0-9]{1,10}, Device:[0-9]{1,4}, RankID:(?P<rank_id>[0-9]{1,6})\)"
)
_MIDLINE_TAG = re.compile(r"\[(?:[0-9]{1,6},)?[0-9]{1,6}\]<std(?:out|err)>:")
"""mpirun's ``--tag-output`` tag where it appears inside a line's body (interleaved output)."""
_MIDLINE_TAG_MARK = "]<std"
PG_RANK_WINDOW = 200
"""The ProcessGroupNCCL rank tag is looked for this far into a line's body."""
_RANK_TAG_MARKS = ("Rank ", "[rank", "[process", "RankID:")
"""Cheap tests for a rank tag in a line's body before :data:`_PG_RANK` runs."""
_PLACEHOLDER_HOST = re.compile(
    r"[xX*#?.]{2,128}|<[^<>\n]{0,64}>"
    r"|(?i:(?:your[-_ ]?|some[-_ ]?)?(?:host[-_ ]?name|node[-_ ]?name|redacted|masked|hidden))"
)
"""What a reporter writes in place of a host name when masking it."""
_LOOPBACK_NAMES = frozenset(
    {
        "localhost",
        "localhost.localdomain",
        "localhost4",
        "localhost6",
        "ip6-localhost",
        "ip6-loopback",
    }
)
"""The names distributions give the loopback interface in /etc/hosts."""


@dataclass(frozen=True, slots=True)
class LinePrefix:
    """Where a line says it came from, as read from its launcher prefixes."""

    body: str
    rank: int | None = None
    host: str | None = None
    pid: str | None = None
    """The process id NCCL's ``host:pid:tid [dev]`` prefix names."""


def cut(raw: bytes, limit: int = MAX_LINE_BYTES) -> bytes:
    """The first ``limit`` bytes of one raw line (without its newline)."""
    return raw if len(raw) <= limit else raw[:limit]


def clean(text: str | bytes, limit: int = MAX_LINE_BYTES) -> str:
    """Decode (with replacement), bound, and strip ANSI codes, CRs and control characters."""
    if isinstance(text, bytes):
        text = cut(text, limit).decode("utf-8", errors="replace")
    elif len(text) > limit:
        text = text[:limit]
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    text = text.rstrip("\r\n")
    if "\r" in text:
        text = text.replace("\r", " ")
    if _CONTROL.search(text) is not None:
        text = _CONTROL.sub(" ", text)
    return text


_STEPD_MARK = "slurmstepd"
"""slurmstepd's own lines, which a task label in front of them does not make that task's."""


def split_prefixes(text: str) -> LinePrefix:
    """Remove launcher prefixes from a cleaned line; report the rank and host they name."""
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    pid: str | None = None
    body = text
    for _ in range(4):
        m = _PREFIX.match(body)
        if m is None:
            break
        found_rank = m["rank_a"] or m["rank_b"] or m["rank_c"]
        if found_rank is not None and rank is None:
            rank = int(found_rank)
        if m["local_rank"] is not None and local_rank is None:
            local_rank = int(m["local_rank"])
        found_host = (
            m["host_a"]
            or m["host_b"]
            or m["host_c"]
            or m["host_d"]
            or m["host_e"]
            or m["host_f"]
            or m["host_g"]
            or m["host_h"]
            or m["host_i"]
        )
        if found_host is not None and host is None:
            host = found_host
            pid = m["pid_a"]
        body = body[m.end() :]
    if _MIDLINE_TAG_MARK in body:
        # mpirun interleaves its ranks' output: a tag inside the body starts another rank's text
        # ("[1,2]<stderr>:[h:1] [ 0] [1,0]<stderr>:  what(): ..."); the rest is that rank's, and
        # keeps the host of the line's start only where the tag names the same rank
        tags = list(_MIDLINE_TAG.finditer(body))
        if tags:
            last = tags[-1]
            rest = split_prefixes(body[last.start() :])
            if rest.rank == rank and rest.host is None:
                return LinePrefix(body=rest.body, rank=rank, host=host, pid=pid)
            return rest
    if rank is not None and body.lstrip().startswith(_STEPD_MARK):
        # srun -l labels slurmstepd's own step-level lines ("0: slurmstepd: error: Detected 1
        # oom_kill event in StepId=...", "*** STEP ... CANCELLED ***") with the stream they
        # arrive on, task 0's: the label names no task that failed
        rank = None
        local_rank = None
    window = body[:PG_RANK_WINDOW]
    if rank is None and any(mark in window for mark in _RANK_TAG_MARKS):
        tag = _PG_RANK.search(body, 0, PG_RANK_WINDOW)
        if tag is not None:
            rank = int(tag["rank"] or tag["rank_kv"] or tag["rank_id"])
    if rank is None:
        # torchrun's role prefix gives only the local rank; a global rank on the line wins
        rank = local_rank
    return LinePrefix(body=body, rank=rank, host=host, pid=pid)


def names_no_host(name: str) -> bool:
    """Whether ``name`` names no host of a cluster: a name the reporter masked ("xxxxxxxx",
    "***", "HOSTNAME", "<node>", "your_hostname"), or the reporting machine's own loopback
    name or address ("localhost", which torchrun's failure table prints on a single node,
    "127.0.0.1", "::1"), which every node calls itself, or the unspecified address a server
    binds to ("0.0.0.0", "::")."""
    return (
        _PLACEHOLDER_HOST.fullmatch(name) is not None
        or name.lower() in _LOOPBACK_NAMES
        or is_loopback_host(name)
        or _is_unspecified_address(name)
    )


def _is_unspecified_address(name: str) -> bool:
    """``name`` is the unspecified IPv4 or IPv6 address (with or without brackets)."""
    try:
        return ipaddress.ip_address(name.strip("[]")).is_unspecified
    except ValueError:
        return False


def truncate(text: str, limit: int = MAX_EVIDENCE_CHARS) -> str:
    """Evidence text: at most ``limit`` characters, marked when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LineSplitter:
    """Split a byte stream, read in arbitrary chunks, into complete bounded lines.

    ``feed(chunk)`` yields ``(line_number, raw_line)`` for every line completed by the chunk
    (1-based numbers, raw bytes without the newline, already cut to ``limit``). A partial last
    line is kept for the next call; at most ``limit`` bytes of it are buffered, the rest of an
    over-long line is dropped as it arrives. ``flush()`` yields the final unterminated line.
    """

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self.line_no = 0
        self._pending = bytearray()
        self._overflow = False

    @property
    def pending(self) -> bytes:
        """The buffered start of the current, unterminated line."""
        return bytes(self._pending)

    def feed(self, chunk: bytes) -> Iterator[tuple[int, bytes]]:
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                self._append(chunk, start, len(chunk))
                return
            self._append(chunk, start, nl)
            self.line_no += 1
            line = bytes(self._pending)
            self._pending.clear()
            self._overflow = False
            yield self.line_no, line
            start = nl + 1

    def flush(self) -> Iterator[tuple[int, bytes]]:
        if self._pending:
            self.line_no += 1
            line = bytes(self._pending)
            self._pending.clear()
            self._overflow = False
            yield self.line_no, line

    def _append(self, chunk: bytes, start: int, end: int) -> None:
        if self._overflow or start >= end:
            return
        room = self.limit - len(self._pending)
        if end - start > room:
            end = start + room
            self._overflow = True
        self._pending += chunk[start:end]
