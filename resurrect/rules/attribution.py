"""From many matched lines to one diagnosis.

The rules say what each line means on its own; attribution weighs them together:

1. **Root beats cascade.** The primary class is chosen among ``root`` evidence: per class the
   highest rule confidence, ties going to the class observed first. Cascade evidence
   (collective timeouts, communicator aborts, SIGABRT teardown, launcher summaries, interrupts)
   decides only when there is no root evidence at all.
2. **Launcher reports.** torchelastic's "Root Cause (first observed failure)" record gives the
   failing rank, its host and exit code. Records become a rank-to-host map; a root-cause record
   that died of a signal is evidence in its own right (SIGSEGV/SIGBUS/... crash; SIGKILL a
   probable host OOM; SIGABRT teardown, a cascade); records listed under "Failures" are cascade.
3. **Collective timeouts** point at the rank that stopped participating: one that never reported
   while the others did, the one whose last completed sequence number is lowest, or the ranks the
   desync report names - unless that is every rank, which identifies nobody.
4. **Fabric errors** name both ends of a link; a host is blamed only when it recurs across
   more pairs than any other, or when one host alone reports a failure of its own adapter or
   NVLink. **A lost peer** (survivors see their connection closed by one peer) blames that peer.
5. **Time and context.** A time-limit kill after training reported it had finished, or after a
   long silence, is a hang. An interrupt (Ctrl-C, SIGINT/SIGTERM to the launcher, scancel) is a
   cancellation - unless the traceback it produced stops in a blocking call (a queue ``get``, a
   lock, a barrier) or the output had been silent for long before it: then the run had hung. A
   wrapper's "job has timed out" long before the requested time is a preemption. A SIGKILL with
   no OOM line is a probable host OOM at low confidence, firmer when the job's host memory was
   seen growing; a low-confidence diagnosis never stops a job (its action becomes restart).
   Hardware classes without a culprit host cannot drain anything, so their action is restart.

:func:`decide` returns every step of this (the candidates per class, the refinements, the
culprits); :func:`attribute` turns it into a :class:`~resurrect.contracts.Diagnosis` and
:mod:`resurrect.rules.explain` into an explanation.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date

from resurrect.contracts import (
    DEFAULT_ACTION,
    Diagnosis,
    Evidence,
    FaultClass,
    RecoveryAction,
    SignalKind,
)
from resurrect.evidence_trust import restart_action
from resurrect.records import carry_over
from resurrect.rules.engine import known_confidences
from resurrect.rules.text import split_prefixes

HANG_SILENCE_S = 5 * 60
"""A time-limit kill or an interrupt after this long without a line is a hang."""
FINISHED_WINDOW_LINES = 50
"""A "training finished" line this close before a time-limit kill means the job hung on exit."""
INTERRUPTED_FRAME_LINES = 2
"""A blocking frame this close before "KeyboardInterrupt" is where the traceback stopped."""
ECHOED_TRACEBACK_LINES = 40
"""After an echoed "^C", blocking frames this close belong to the interrupted traceback."""
EARLY_TIMEOUT_FRACTION = 0.9
"""A wrapper's "timed out" before this fraction of the requested time is a preemption."""
LOW_CONFIDENCE = 0.5
LOST_PEER_CONFIDENCE = 0.45
"""A node loss inferred only from survivors' closed connections: below the confidence at which a
scheduler-observed node loss (with the node's real name) takes over, and never a stop."""
MAX_LISTED = 50

INTERRUPT_RULES = frozenset(
    {"python.keyboard_interrupt", "torchelastic.interrupt_signal", "slurm.cancelled_by_user"}
)
"""Rules whose evidence is a person or a launcher stopping the run."""
BLOCKING_FRAME_RULE = "python.blocking_frame"
LAUNCHER_SIGNAL_RULE = "torchelastic.interrupt_signal"
HOST_MEMORY_RULE = "memory.host_usage_report"
WRAPPER_TIMEOUT_RULES = frozenset({"slurm.time_limit_wrapper", "slurm.wrapper_signal_timeout"})
"""A job wrapper's reading of a signal as the time limit (the scheduler's own word outranks it)."""
LOCAL_FABRIC_RULES = ("nccl.ib_verbs_failure", "nccl.ib_link_down", "xid.", "gpu.")
PROBE_KINDS = frozenset({SignalKind.STACK_DUMP, SignalKind.PROGRESS})
"""Evidence from resurrect's own probes of the ranks (their stacks, their progress)."""
PROCESS_HOST_RULE = "nccl.process_host"
BEHIND_RULES = frozenset({"flight_recorder.behind", "nccl_ras.rank"})
"""Probe findings that name a rank behind its peers (the job's Flight Recorder, NCCL RAS)."""
EXIT_REPORT_RULES = frozenset(
    {
        "torchelastic.worker_exit",
        "torchelastic.worker_signal_crash",
        "launcher.worker_command_exit",
        "launcher.ray_train_worker_failed",
        "launcher.mpirun_signal_crash",
        "launcher.mpirun_first_failure",
        "slurm.task_exit",
        "slurm.task_signal",
        "slurm.task_killed",
        "slurm.task_out_of_memory",
        "memory.sigkill_worker",
        "python.spawn_child_failed",
    }
)
"""Launcher and scheduler lines that name a rank that exited badly (its cause is elsewhere)."""
TEARDOWN_EXIT_CODES = frozenset({-6, -15, -2, -1})
"""Exit codes of a process taken down after another failure (or by a person): never a culprit."""
LAUNCHER_SIGINT = frozenset({"2", "SIGINT"})
_PROGRESS_LINE = re.compile(
    r"\d{1,3}%\|"  # a tqdm bar
    r"|\b\d{1,12}/\d{1,12} \[\d"  # "450/1000 [10:23<..."
    r"|(?i:\b(?:epoch|step|iter(?:ation)?|batch|it)\b\s{0,3}[:=#]?\s{0,3}\[?\d{1,12})"
    r"|(?i:\b(?:loss|lr)\s{0,3}[:=]\s{0,3}-?\d)"
)
"""A line reporting training progress (a progress bar, a step counter, a loss)."""
"""Fabric evidence about the reporting host's own adapter or NVLink (not a two-ended link)."""

_NO_CULPRIT_CLASSES = frozenset(
    {FaultClass.JOB_TIME_LIMIT, FaultClass.JOB_PREEMPTED, FaultClass.JOB_CANCELLED}
)
_SIGNAL_EXIT: dict[int, tuple[FaultClass, str, float]] = {
    -9: (FaultClass.MEMORY_HOST_OOM, "root", 0.35),
    -11: (FaultClass.PROCESS_CRASH, "root", 0.6),
    -7: (FaultClass.PROCESS_CRASH, "root", 0.6),
    -4: (FaultClass.PROCESS_CRASH, "root", 0.6),
    -8: (FaultClass.PROCESS_CRASH, "root", 0.6),
    -6: (FaultClass.PROCESS_CRASH, "cascade", 0.35),
}
_RECORD_OPENERS = frozenset({"torchelastic.block_host", "torchelastic.block_rank"})
"""Lines that open a torchelastic failure record when no section header came before them."""
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)")
_GLOG = re.compile(r"(?:^|[\s\[])[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\b")
_CLOCK = re.compile(r"^\[?(\d\d):(\d\d):(\d\d)\b(?![<:])")
_RANK_LIST = re.compile(r"\d+")
_LAUNCHER_WAIT = re.compile(
    r"(?:subprocess|popen_\w+)\.py\", line \d+,? in _?(?:wait|communicate)\b"
)
_UNIT_BYTES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass
class _Record:
    """One failure record of a torchelastic error report."""

    root: bool
    host: str | None = None
    rank: int | None = None
    exit_code: int | None = None
    pid: str | None = None
    evidence: list[Evidence] = field(default_factory=list)


@dataclass(frozen=True)
class Candidate:
    """One fault class the evidence supports, with its strongest line."""

    fault_class: FaultClass
    role: str
    """``root`` or ``cascade``."""
    score: float
    first_index: int
    """Where the class's first evidence is among its role's evidence (ties: earlier wins)."""
    strongest: Evidence
    count: int


@dataclass(frozen=True)
class Refinement:
    """A change of the chosen class (or its confidence) made by time and context."""

    from_class: FaultClass
    to_class: FaultClass
    reason: str
    evidence: Evidence | None = None


@dataclass
class Decision:
    """Every step of one attribution: what :func:`attribute` and the explanation are made of."""

    fault_class: FaultClass
    confidence: float
    action: RecoveryAction
    decided_by: str
    """``root``, ``cascade``, ``context`` (a blocking frame alone) or ``none``."""
    candidates: list[Candidate]
    """The winning class first (as chosen before refinements), then the others, best first."""
    primary: list[Evidence]
    cascades: list[Evidence]
    roots: list[Evidence]
    refinements: list[Refinement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    culprit_hosts: list[str] = field(default_factory=list)
    culprit_ranks: list[int] = field(default_factory=list)
    culprit_gpus: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    """Everything considered, launcher-record evidence included."""


def _confidence(ev: Evidence, confidences: Mapping[str, float]) -> float:
    if ev.confidence is not None:
        return ev.confidence
    return confidences.get(ev.rule or "", 0.5)


def _launcher_records(evidence: Sequence[Evidence]) -> list[_Record]:
    """Rebuild torchelastic failure records from their matched lines (per file, in order).

    A record pasted without its section header (its ``host :`` or ``rank : N (local_rank: M)``
    line comes first) is read as the root cause - that is the record people quote - unless the
    same file also shows the "Root Cause" section itself."""
    records: list[_Record] = []
    section: dict[str | None, bool] = {}
    current: dict[str | None, _Record] = {}
    headerless: list[tuple[str | None, _Record]] = []
    explicit_root: set[str | None] = set()
    for ev in evidence:
        rule = ev.rule or ""
        if not rule.startswith("torchelastic.block_"):
            continue
        key = ev.file
        if rule == "torchelastic.block_header":
            section[key] = ev.fields.get("section", "").startswith("Root")
            if section[key]:
                explicit_root.add(key)
            current.pop(key, None)
            continue
        implicit = key not in section
        if implicit:
            if rule not in _RECORD_OPENERS:
                continue
            section[key] = True
        rec = current.get(key)
        if rule == "torchelastic.block_host" or rec is None:
            rec = _Record(root=section[key])
            current[key] = rec
            records.append(rec)
            if implicit:
                headerless.append((key, rec))
        rec.evidence.append(ev)
        if rule == "torchelastic.block_host":
            rec.host = ev.fields.get("host")
        elif rule == "torchelastic.block_rank" and ev.rank is not None:
            rec.rank = ev.rank
        elif rule == "torchelastic.block_exitcode":
            rec.pid = ev.fields.get("pid")
            try:
                rec.exit_code = int(ev.fields.get("exit_code", ""))
            except ValueError:
                rec.exit_code = None
    for key, rec in headerless:
        if key in explicit_root:
            rec.root = False
    return records


def _record_evidence(rec: _Record) -> Evidence | None:
    """A launcher record that died of a signal, as evidence of its own."""
    if rec.exit_code is None or rec.exit_code not in _SIGNAL_EXIT:
        return None
    fault_class, role, _ = _SIGNAL_EXIT[rec.exit_code]
    base = next(
        (e for e in rec.evidence if e.rule == "torchelastic.block_exitcode"), rec.evidence[0]
    )
    return base.model_copy(
        update={
            "rule": f"torchelastic.root_cause_signal{rec.exit_code}",
            "role": role if rec.root else "cascade",
            "fault_class": fault_class,
            "host": rec.host,
            "rank": rec.rank,
        }
    )


def _process_hosts(evidence: Sequence[Evidence]) -> tuple[dict[str, str], dict[int, str]]:
    """Hosts NCCL's INFO lines name: by process id (their ``host:pid:tid`` prefix), and by rank
    (the init line of the largest communicator, whose ranks are the global ranks)."""
    by_pid: dict[str, str] = {}
    by_rank: dict[int, str] = {}
    largest = 0
    for ev in evidence:
        if ev.rule != PROCESS_HOST_RULE or not ev.host:
            continue
        if pid := ev.fields.get("pid"):
            by_pid.setdefault(pid, ev.host)
        rank, size = ev.fields.get("comm_rank", ""), ev.fields.get("nranks", "")
        if rank.isdigit() and size.isdigit() and int(size) >= largest:
            if int(size) > largest:
                largest, by_rank = int(size), {}
            by_rank.setdefault(int(rank), ev.host)
    return by_pid, by_rank


# -- time ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stamp:
    """When a line was printed, as precisely as the line says."""

    day: date | None
    """The date; year 2000 stands in when the line has month and day only (glog)."""
    has_year: bool
    seconds: int
    """Seconds since midnight."""


def _stamp(text: str | None) -> _Stamp | None:
    """The time a line carries: ISO date and time, glog ``E1206 18:44:12``, or a leading clock."""
    if not text:
        return None
    try:
        if m := _ISO.search(text):
            y, mo, d, hh, mm, ss = (int(g) for g in m.groups())
            return _Stamp(date(y, mo, d), True, hh * 3600 + mm * 60 + ss)
        if m := _GLOG.search(text):
            mo, d, hh, mm, ss = (int(g) for g in m.groups())
            return _Stamp(date(2000, mo, d), False, hh * 3600 + mm * 60 + ss)
    except ValueError:
        return None
    if m := _CLOCK.match(split_prefixes(text).body.lstrip()):
        hh, mm, ss = (int(g) for g in m.groups())
        if hh < 24 and mm < 60 and ss < 60:
            return _Stamp(None, False, hh * 3600 + mm * 60 + ss)
    return None


def _gap_s(before: _Stamp, after: _Stamp) -> int:
    """Seconds from ``before`` to ``after`` (within a day when either lacks a date)."""
    if before.day and after.day and before.has_year == after.has_year:
        return (after.day - before.day).days * 86400 + after.seconds - before.seconds
    return (after.seconds - before.seconds) % 86400


def silence_before(ev: Evidence) -> int | None:
    """Seconds between the line before ``ev`` and ``ev`` itself, when both carry a time."""
    at = _stamp(ev.fields.get("ts")) or _stamp(ev.text)
    before = _stamp(ev.fields.get("previous_line"))
    if at is None or before is None:
        return None
    return _gap_s(before, at)


# -- context refinements -------------------------------------------------------------------


def _time_limit_hang(limit: Evidence, evidence: Sequence[Evidence]) -> str | None:
    """Why a time-limit kill ended a hang: training had finished, or the log had gone silent."""
    killed_line = limit.line or 0
    finished = [
        e
        for e in evidence
        if e.fault_class is FaultClass.JOB_HANG
        and e.role == "diagnostic"
        and e.rule != BLOCKING_FRAME_RULE
        and e.file == limit.file
        and 0 < killed_line - (e.line or 0) <= FINISHED_WINDOW_LINES
    ]
    if finished:
        return f"training had reported it finished ({finished[-1].text[:80].strip()!r})"
    silent = silence_before(limit)
    if silent is not None and silent >= HANG_SILENCE_S:
        return f"no output for {silent // 60} min before the time limit killed it"
    return None


def _stopped_in(interrupt: Evidence, evidence: Sequence[Evidence]) -> Evidence | None:
    """The blocking frame an interrupted traceback stops in, if it stops in one."""
    frames = [
        e
        for e in evidence
        if e.rule == BLOCKING_FRAME_RULE and e.file == interrupt.file and e.line is not None
    ]
    at = interrupt.line or 0
    if interrupt.fields.get("echo"):  # "^C" echoed, the traceback follows
        after = [e for e in frames if 0 <= (e.line or 0) - at <= ECHOED_TRACEBACK_LINES]
        return after[-1] if after else None
    if interrupt.rule == LAUNCHER_SIGNAL_RULE:
        # the launcher forwards the signal; its workers' tracebacks follow. Its own shutdown
        # (waiting for those workers to exit) is no sign of a hang.
        after = [
            e
            for e in frames
            if 0 < (e.line or 0) - at <= ECHOED_TRACEBACK_LINES
            and not _LAUNCHER_WAIT.search(e.text)
        ]
        return after[-1] if after else None
    before = [e for e in frames if 0 < at - (e.line or 0) <= INTERRUPTED_FRAME_LINES]
    return before[-1] if before else None


def _interrupted_hang(
    primary: Sequence[Evidence], evidence: Sequence[Evidence]
) -> tuple[str, Evidence] | None:
    """Why an interrupt ended a hang: where the traceback stopped, or the silence before it."""
    for ev in primary:
        if ev.rule not in INTERRUPT_RULES:
            continue
        frame = _stopped_in(ev, evidence)
        if frame is not None:
            return f"the interrupted traceback stops in a blocking call: {frame.text.strip()}", ev
        silent = silence_before(ev)
        if silent is not None and silent >= HANG_SILENCE_S:
            return f"no output for {silent // 60} min before the interrupt", ev
    return None


def _stalled_then_interrupted(primary: Sequence[Evidence]) -> tuple[str, Evidence] | None:
    """SIGINT (a person at the terminal) to the launcher right after a progress report: the
    progress had stopped and the person gave up waiting; the stall is the fault."""
    for ev in primary:
        if ev.rule != LAUNCHER_SIGNAL_RULE:
            continue
        if (ev.fields.get("signal") or ev.fields.get("signal_exc")) not in LAUNCHER_SIGINT:
            continue
        before = ev.fields.get("previous_line", "")
        if _PROGRESS_LINE.search(split_prefixes(before).body):
            return (
                "progress stopped (last report: "
                f"{before[:80].strip()!r}), then a person interrupted the launcher",
                ev,
            )
    return None


def _early_timeout(primary: Sequence[Evidence]) -> tuple[str, Evidence] | None:
    """A wrapper's "timed out" long before the requested time: the signal was a preemption."""
    if not primary or any(e.rule not in WRAPPER_TIMEOUT_RULES for e in primary):
        return None  # a scheduler's own TIMEOUT / "DUE TO TIME LIMIT" decides
    for ev in primary:
        ran, requested = ev.fields.get("ran", ""), ev.fields.get("requested", "")
        if not (ran.isdigit() and requested.isdigit()):
            continue
        r, q = int(ran), int(requested)
        if r < EARLY_TIMEOUT_FRACTION * q and q - r >= 1:
            return (
                f"the wrapper called it a timeout after {r} of {q} requested minutes: the "
                "signal that stopped it was not the time limit",
                ev,
            )
    return None


def _memory_growth(evidence: Sequence[Evidence]) -> tuple[str, Evidence] | None:
    """Host-memory readings that rose before a kill, first and last."""
    readings: list[tuple[float, Evidence]] = []
    for ev in evidence:
        if ev.rule != HOST_MEMORY_RULE:
            continue
        try:
            amount = float(ev.fields.get("amount", ""))
        except ValueError:
            continue
        unit = ev.fields.get("unit", "B")[:1].upper()
        readings.append((amount * _UNIT_BYTES.get(unit, 1), ev))
    if len(readings) >= 2 and readings[-1][0] > readings[0][0]:
        first, last = readings[0][1], readings[-1][1]
        return (
            f"host memory grew from {first.fields['amount']} {first.fields.get('unit', '')} to "
            f"{last.fields['amount']} {last.fields.get('unit', '')} before the kill",
            last,
        )
    return None


# -- culprits ------------------------------------------------------------------------------


def _collective_culprits(evidence: Sequence[Evidence], cascades: Sequence[Evidence]) -> list[int]:
    """The rank(s) that stopped participating in a timed-out collective, when identifiable."""
    timeouts = [e for e in cascades if e.fault_class is FaultClass.COLLECTIVE_TIMEOUT]
    # The desync report names the lagging ranks directly.
    named: set[int] = set()
    for e in timeouts:
        if e.rule == "nccl.desync_report":
            named.update(int(x) for x in _RANK_LIST.findall(e.fields.get("ranks", "")))
    reporters = {e.rank for e in timeouts if e.rank is not None}
    if named:
        if reporters and reporters <= named:
            return []  # every reporter is in the list: all joined, nobody singled out
        return sorted(named)
    # The rank whose last completed sequence number is strictly lowest - comparable only within
    # one process group (each group numbers its own collectives).
    last: dict[int, int] = {}
    groups: set[str] = set()
    for e in timeouts:
        value = e.fields.get("last_completed") or e.fields.get("last_completed2")
        if e.rank is not None and value is not None and value.lstrip("-").isdigit():
            last[e.rank] = min(int(value), last.get(e.rank, int(value)))
            groups.add(e.fields.get("pg_guid") or e.fields.get("pg") or "")
    if len(last) >= 2 and len(groups) == 1:
        low = min(last.values())
        lowest = [r for r, v in last.items() if v == low]
        if len(lowest) == 1 and len(lowest) < len(last):
            return lowest
    # A rank that never reported while the others did.
    world = 0
    for e in evidence:
        size = e.fields.get("world_size")
        if size and size.isdigit():
            world = max(world, int(size))
    known = set(range(world)) if world else {e.rank for e in evidence if e.rank is not None}
    missing = known - reporters
    if len(reporters) >= 2 and missing and len(missing) < len(reporters):
        return sorted(missing)
    return []


def _fabric_culprits(roots: Sequence[Evidence]) -> list[str]:
    """A host that recurs across more failed links than any other, or the one host whose own
    adapter or NVLink failed."""
    pairs: set[tuple[str, str]] = set()
    for e in roots:
        peer = e.fields.get("peer")
        if e.host and peer:
            a, b = sorted((e.host, peer))
            pairs.add((a, b))
    counts = Counter(end for pair in pairs for end in pair)
    if len(pairs) >= 2 and counts:
        (top, n), *rest = counts.most_common()
        if n >= 2 and (not rest or rest[0][1] < n):
            return [top]
    local = {
        e.host
        for e in roots
        if e.host and not e.fields.get("peer") and (e.rule or "").startswith(LOCAL_FABRIC_RULES)
    }
    return sorted(local) if len(local) == 1 else []


def _lost_node_culprits(primary: Sequence[Evidence], hosts: Mapping[int, str]) -> list[str]:
    """The lost node: named by the scheduler or kernel, else the one peer survivors lost."""
    direct = [e for e in primary if not e.fields.get("peer")]
    if direct:
        return [
            h
            for h in _ordered_unique(
                [e.host or hosts.get(e.rank if e.rank is not None else -1) for e in direct]
            )
            if isinstance(h, str)
        ]
    peers = {e.fields["peer"] for e in primary if e.fields.get("peer")}
    return sorted(peers) if len(peers) == 1 else []


def _ranks(evidence: Sequence[Evidence]) -> list[int]:
    """The ranks ``evidence`` names, in order, once each; a range (srun's ``tasks 1-3``)
    names each of its ranks, up to :data:`MAX_LISTED`."""
    named: list[int | None] = []
    for e in evidence:
        named.append(e.rank)
        last = e.fields.get("rank_last", "")
        if e.rank is not None and last.isdigit():
            named.extend(range(e.rank + 1, min(int(last), e.rank + MAX_LISTED) + 1))
    return [r for r in _ordered_unique(named) if isinstance(r, int)]


def _hosts(evidence: Sequence[Evidence], hosts: Mapping[int, str]) -> list[str]:
    """The hosts ``evidence`` names (its own, else its rank's), in order, once each."""
    named = [e.host or hosts.get(e.rank if e.rank is not None else -1) for e in evidence]
    return [h for h in _ordered_unique(named) if isinstance(h, str)]


def _hosts_of(
    ranks: Sequence[int], evidence: Sequence[Evidence], hosts: Mapping[int, str]
) -> list[str]:
    """The hosts of ``ranks``: as their own lines say, else as the launcher's map says."""
    found: list[str | None] = []
    for rank in ranks:
        own = next((e.host for e in evidence if e.rank == rank and e.host), None)
        found.append(own or hosts.get(rank))
    return [h for h in _ordered_unique(found) if isinstance(h, str)]


def _exit_code(ev: Evidence) -> int | None:
    """The exit code an exit report states (a signal as its negative number, -9 for SIGKILL)."""
    text = ev.fields.get("exit_code") or ev.fields.get("exit_status") or ""
    if text.lstrip("-").isdigit():
        return int(text)
    if ev.fields.get("signum", "").isdigit():
        return -int(ev.fields["signum"])
    if ev.rule == "memory.sigkill_worker" or ev.fields.get("signal") == "SIGKILL":
        return -9
    signal = ev.fields.get("signal", "")
    return -int(signal) if signal.isdigit() else None


def _first_failure(
    records: Sequence[_Record], evidence: Sequence[Evidence], *, teardown: bool = False
) -> tuple[int, str | None] | None:
    """The rank (and host) that failed first, as the launcher reports it: torchelastic's
    root-cause record, else the first exit report (an agent's ``failed (exitcode: 1)
    local_rank: N``, a worker command line's ``--local_rank=N ... exits with return code``,
    srun's ``task N``, Ray Train's ``Worker N has failed``). A process taken down by a
    teardown signal names nobody, unless that teardown is itself what was diagnosed
    (``teardown``)."""
    for rec in records:
        if (
            rec.root
            and rec.rank is not None
            and (teardown or rec.exit_code not in TEARDOWN_EXIT_CODES)
        ):
            return rec.rank, rec.host
    for ev in _print_order([e for e in evidence if e.rule in EXIT_REPORT_RULES]):
        code = _exit_code(ev)
        if ev.rank is not None and code not in TEARDOWN_EXIT_CODES and code != 0:
            return ev.rank, ev.host
    return None


def _print_order(evidence: Sequence[Evidence]) -> list[Evidence]:
    """Evidence in the order it was printed: by its timestamps when every line has one."""
    stamps = [_stamp(e.text) for e in evidence]
    if evidence and all(s is not None for s in stamps):
        keyed = sorted(
            zip(stamps, range(len(evidence)), evidence, strict=True),
            key=lambda t: (t[0].day or date.min, t[0].seconds, t[1]) if t[0] else (date.min, 0, 0),
        )
        return [e for _, _, e in keyed]
    return list(evidence)


def _candidates(
    pool: Sequence[Evidence], role: str, confidences: Mapping[str, float]
) -> list[Candidate]:
    """Per class: the highest confidence and where the class was first seen; best first."""
    best: dict[FaultClass, tuple[float, int, Evidence, int]] = {}
    for index, ev in enumerate(pool):
        assert ev.fault_class is not None
        score = _confidence(ev, confidences)
        prev = best.get(ev.fault_class)
        if prev is None:
            best[ev.fault_class] = (score, index, ev, 1)
        else:
            strongest = ev if score > prev[0] else prev[2]
            best[ev.fault_class] = (max(score, prev[0]), prev[1], strongest, prev[3] + 1)
    out = [
        Candidate(cls, role, score, first, strongest, count)
        for cls, (score, first, strongest, count) in best.items()
    ]
    return sorted(out, key=lambda c: (-c.score, c.first_index))


def _ordered_unique(values: Sequence[object]) -> list[object]:
    seen: list[object] = []
    for v in values:
        if v is not None and v not in seen:
            seen.append(v)
    return seen


# -- the decision --------------------------------------------------------------------------


def proposed_action(
    fault_class: FaultClass, culprit_hosts: Sequence[str], confidence: float
) -> tuple[RecoveryAction, str | None]:
    """The action a diagnosis proposes, with a note when it is not the class' default.

    Drain or restart is :func:`~resurrect.plans.decide.restart_action`'s rule (the recovery's
    ``decide()`` settles the drain again against the job's nodes and a second source);
    evidence weaker than ``LOW_CONFIDENCE`` never stops a job.
    """
    action = DEFAULT_ACTION[fault_class]
    if action is RecoveryAction.DRAIN_AND_RESTART:
        action = restart_action(fault_class, culprit_hosts)
        if action is RecoveryAction.RESTART:
            return action, "no culprit host identified, so nothing to drain"
    if confidence < LOW_CONFIDENCE and action is RecoveryAction.STOP:
        return RecoveryAction.RESTART, "evidence too weak to stop the job"
    return action, None


def decide(
    evidence: Sequence[Evidence],
    *,
    rank_to_host: Mapping[int, str] | None = None,
    confidences: Mapping[str, float] | None = None,
) -> Decision:
    """Weigh all evidence of an interruption (any files, ranks, hosts) into one decision.

    ``confidences`` maps rule id to rule confidence; without it, the rules of every engine built
    in this process (and the shipped packs) are used. Rules unknown to both weigh 0.5.
    """
    conf = known_confidences() if confidences is None else dict(confidences)
    for code, (_, _, value) in _SIGNAL_EXIT.items():
        conf[f"torchelastic.root_cause_signal{code}"] = value

    hosts: dict[int, str] = dict(rank_to_host or {})
    records = _launcher_records(evidence)
    pid_hosts, comm_hosts = _process_hosts(evidence)
    all_ev = list(evidence)
    for rec in records:
        if rec.host is None and rec.pid is not None:
            rec.host = pid_hosts.get(rec.pid)
        if rec.rank is not None and rec.host:
            hosts.setdefault(rec.rank, rec.host)
        extra = _record_evidence(rec)
        if extra is not None:
            all_ev.append(extra)
    for ev in all_ev:
        if ev.rank is not None and ev.host and ev.rule and ev.rule.startswith("srun"):
            hosts.setdefault(ev.rank, ev.host)
    for ev in all_ev:  # an exit report's pid, on a host NCCL named
        pid = ev.fields.get("pid")
        if ev.rule in EXIT_REPORT_RULES and ev.rank is not None and pid in pid_hosts:
            hosts.setdefault(ev.rank, pid_hosts[pid])
    for rank, host in comm_hosts.items():
        hosts.setdefault(rank, host)

    roots = [e for e in all_ev if e.role == "root" and e.fault_class is not None]
    cascades = [e for e in all_ev if e.role == "cascade"]
    classed_cascades = [e for e in cascades if e.fault_class is not None]
    root_candidates = _candidates(roots, "root", conf)
    cascade_candidates = _candidates(classed_cascades, "cascade", conf)
    candidates = root_candidates + cascade_candidates

    if root_candidates:
        winner = root_candidates[0]
        score = winner.score
        primary = [e for e in roots if e.fault_class is winner.fault_class]
        decided_by = "root"
    elif cascade_candidates:
        winner = cascade_candidates[0]
        score = min(winner.score, 0.7)
        primary = [e for e in classed_cascades if e.fault_class is winner.fault_class]
        decided_by = "cascade"
    else:
        frames = [e for e in all_ev if e.rule == BLOCKING_FRAME_RULE]
        if not frames:
            first = _first_failure(records, all_ev)
            return Decision(
                fault_class=FaultClass.UNKNOWN,
                confidence=0.0,
                action=DEFAULT_ACTION[FaultClass.UNKNOWN],
                decided_by="none",
                candidates=[],
                primary=[],
                cascades=cascades,
                roots=[],
                notes=["no rule matched a failure"],
                culprit_ranks=[first[0]] if first else [],
                culprit_hosts=[h] if first and (h := first[1] or hosts.get(first[0])) else [],
                evidence=all_ev,
            )
        # Nothing failed, and a traceback stops in a blocking call: a process dump of a stall.
        decision = Decision(
            fault_class=FaultClass.JOB_HANG,
            confidence=0.4,
            action=DEFAULT_ACTION[FaultClass.JOB_HANG],
            decided_by="context",
            candidates=[],
            primary=frames,
            cascades=cascades,
            roots=[],
            notes=["nothing failed, and a traceback stops in a blocking call"],
            evidence=all_ev,
        )
        return decision

    fault_class = winner.fault_class
    refinements: list[Refinement] = []
    notes: list[str] = []

    if fault_class is FaultClass.JOB_TIME_LIMIT:
        limit = next((e for e in primary if e.rule not in WRAPPER_TIMEOUT_RULES), primary[0])
        if (why := _time_limit_hang(limit, all_ev)) is not None:
            refinements.append(Refinement(fault_class, FaultClass.JOB_HANG, why, limit))
            fault_class = FaultClass.JOB_HANG
            score = max(0.6, score - 0.25)
        elif (early := _early_timeout(primary)) is not None:
            refinements.append(Refinement(fault_class, FaultClass.JOB_PREEMPTED, *early))
            fault_class = FaultClass.JOB_PREEMPTED
            score = max(0.6, score - 0.2)
    elif fault_class is FaultClass.JOB_CANCELLED:
        if (hang := _interrupted_hang(primary, all_ev)) is not None:
            refinements.append(Refinement(fault_class, FaultClass.JOB_HANG, *hang))
            fault_class = FaultClass.JOB_HANG
            score = max(score, 0.6)
        elif (stall := _stalled_then_interrupted(primary)) is not None:
            refinements.append(Refinement(fault_class, FaultClass.JOB_HANG, *stall))
            fault_class = FaultClass.JOB_HANG
            score = max(score, 0.55)
    elif fault_class is FaultClass.MEMORY_HOST_OOM and score < LOW_CONFIDENCE:
        if (growth := _memory_growth(all_ev)) is not None:
            refinements.append(Refinement(fault_class, fault_class, *growth))
            score = 0.55
    for refinement in refinements:
        notes.append(refinement.reason)

    # Corroboration: independent rules agreeing raise confidence a little.
    distinct_rules = {e.rule for e in primary}
    confidence = min(0.99, score + 0.03 * (len(distinct_rules) - 1))

    culprit_ranks: list[int] = []
    culprit_hosts: list[str] = []
    ordered = _print_order(primary)
    behind = [e for e in all_ev if e.rule in BEHIND_RULES and e.rank is not None]
    if fault_class is FaultClass.COLLECTIVE_TIMEOUT and not roots:
        culprit_ranks = _ranks(behind) or _collective_culprits(all_ev, cascades)
        culprit_hosts = _hosts_of(culprit_ranks, [*behind, *cascades], hosts)
    elif fault_class is FaultClass.NETWORK_FABRIC:
        culprit_hosts = _fabric_culprits(primary)
        culprit_ranks = _ranks(ordered)
    elif fault_class is FaultClass.NODE_LOST:
        culprit_hosts = _lost_node_culprits(ordered, hosts)
        if all(e.fields.get("peer") for e in primary):
            confidence = min(confidence, LOST_PEER_CONFIDENCE)
            notes.append(
                "inferred from survivors' closed connections to " + ", ".join(culprit_hosts)
                if culprit_hosts
                else "survivors lost connections to several peers: no single lost node"
            )
    elif fault_class is FaultClass.JOB_HANG:
        probed = [e for e in ordered if e.kind in PROBE_KINDS and (e.rank is not None or e.host)]
        named = probed or behind
        culprit_ranks = _ranks(named)
        culprit_hosts = _hosts_of(culprit_ranks, named, hosts) or _hosts(named, hosts)
    elif fault_class not in _NO_CULPRIT_CLASSES:
        top = max(_confidence(e, conf) for e in ordered)
        decisive = [e for e in ordered if _confidence(e, conf) >= top]
        # the strongest lines that name a rank, when the strongest of all name none
        ranked = [e for e in ordered if e.rank is not None]
        top_ranked = max((_confidence(e, conf) for e in ranked), default=0.0)
        culprit_ranks = _ranks(decisive) or _ranks(
            [e for e in ranked if _confidence(e, conf) >= top_ranked]
        )
        # The launcher's "first observed failure" picks one of several failing ranks; an exit
        # report only names a rank where nothing else does.
        root = _first_failure(records, [], teardown=decided_by == "cascade")
        first = root if root is not None or culprit_ranks else _first_failure([], all_ev)
        if first is not None and (not culprit_ranks or first[0] in culprit_ranks):
            culprit_ranks = [first[0]]
            if first[1]:
                hosts.setdefault(first[0], first[1])
        culprit_hosts = (
            _hosts(decisive, hosts)
            or _hosts(ordered, hosts)
            or _hosts_of(culprit_ranks, all_ev, hosts)
        )
        if culprit_ranks and len(culprit_hosts) > 1:
            culprit_hosts = _hosts_of(culprit_ranks, ordered, hosts) or culprit_hosts
    culprit_gpus = [g for g in _ordered_unique([e.gpu for e in ordered]) if isinstance(g, str)]

    action, why = proposed_action(fault_class, culprit_hosts, confidence)
    if why is not None:
        notes.append(why)

    return Decision(
        fault_class=fault_class,
        confidence=round(confidence, 3),
        action=action,
        decided_by=decided_by,
        candidates=candidates,
        primary=primary,
        cascades=cascades,
        roots=roots,
        refinements=refinements,
        notes=notes,
        culprit_hosts=culprit_hosts,
        culprit_ranks=culprit_ranks,
        culprit_gpus=culprit_gpus,
        evidence=all_ev,
    )


def attribute(
    evidence: Sequence[Evidence],
    *,
    rank_to_host: Mapping[int, str] | None = None,
    confidences: Mapping[str, float] | None = None,
) -> Diagnosis:
    """One :class:`Diagnosis` from all evidence of an interruption (any files, ranks, hosts):
    what :func:`decide` makes of it (``confidences`` as there)."""
    return diagnosis_of(decide(evidence, rank_to_host=rank_to_host, confidences=confidences))


def diagnosis_of(decision: Decision) -> Diagnosis:
    """The :class:`Diagnosis` a decision amounts to."""
    if decision.decided_by == "none":
        return Diagnosis(
            fault_class=FaultClass.UNKNOWN,
            action=decision.action,
            confidence=0.0,
            culprit_ranks=decision.culprit_ranks,
            culprit_hosts=decision.culprit_hosts,
            evidence=[e for e in decision.evidence if e.role == "diagnostic"][:MAX_LISTED],
            summary="unknown: no rule matched a failure"
            + (
                f"; the launcher reports rank {decision.culprit_ranks[0]} failed first"
                + (f" on {decision.culprit_hosts[0]}" if decision.culprit_hosts else "")
                if decision.culprit_ranks
                else ""
            ),
        )
    primary = decision.primary
    others = [e for e in decision.roots if e.fault_class is not primary[0].fault_class]
    listed = (primary + others)[:MAX_LISTED] if decision.roots else primary[:MAX_LISTED]
    cascade_list = sorted(
        decision.cascades, key=lambda e: (e.rule or "", e.file or "", e.line or 0)
    )
    return carry_over(
        decision,
        Diagnosis,
        evidence=listed,
        cascade=cascade_list[:MAX_LISTED] if decision.roots else [],
        summary=_summary(decision),
    )


def _summary(decision: Decision) -> str:
    parts = [f"{decision.fault_class.value} (confidence {decision.confidence:.2f})"]
    where = []
    if decision.culprit_hosts:
        where.append("host " + ", ".join(decision.culprit_hosts))
    if decision.culprit_ranks:
        where.append("rank " + ", ".join(str(r) for r in decision.culprit_ranks))
    if decision.culprit_gpus:
        where.append("GPU " + ", ".join(decision.culprit_gpus))
    if where:
        parts.append("on " + "; ".join(where))
    first = decision.primary[0]
    loc = f"{first.file}:{first.line}" if first.file and first.line else (first.file or "input")
    parts.append(f"- {first.rule} at {loc}: {first.text[:200].strip()}")
    text = " ".join(parts)
    if decision.cascades:
        counts = Counter(e.rule for e in decision.cascades)
        text += "; cascade: " + ", ".join(f"{rule} x{n}" for rule, n in counts.most_common(5))
    if decision.notes:
        text += "; " + "; ".join(decision.notes)
    return text
