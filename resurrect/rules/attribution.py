"""From many matched lines to one diagnosis.

The rules say what each line means on its own; attribution weighs them together:

1. **Root beats cascade.** The primary class is chosen among ``root`` evidence: per class the
   highest rule confidence, ties going to the class observed first. Cascade evidence
   (collective timeouts, communicator aborts, SIGABRT teardown, launcher summaries) decides only
   when there is no root evidence at all.
2. **Launcher reports.** torchelastic's "Root Cause (first observed failure)" record gives the
   failing rank, its host and exit code. Records become a rank-to-host map; a root-cause record
   that died of a signal is evidence in its own right (SIGSEGV/SIGBUS/... crash; SIGKILL a
   probable host OOM; SIGABRT teardown, a cascade); records listed under "Failures" are cascade.
3. **Collective timeouts** point at the rank that stopped participating: one that never reported
   while the others did, the one whose last completed sequence number is lowest, or the ranks the
   desync report names - unless that is every rank, which identifies nobody.
4. **Fabric errors** name both ends of a link; a host is blamed only when it recurs across
   more pairs than any other.
5. **Refinements.** A time-limit kill after training reported it had finished, or after a long
   silence, is a hang. A SIGKILL with no OOM line is a probable host OOM at low confidence; a
   low-confidence diagnosis never stops a job (its action becomes restart). Hardware classes
   without a culprit host cannot drain anything, so their action is restart.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from resurrect.contracts import (
    DEFAULT_ACTION,
    Diagnosis,
    Evidence,
    FaultClass,
    RecoveryAction,
)
from resurrect.rules.engine import known_confidences

HANG_SILENCE_S = 5 * 60
"""A time-limit kill after this long without a line is a hang."""
FINISHED_WINDOW_LINES = 50
"""A "training finished" line this close before a time-limit kill means the job hung on exit."""
LOW_CONFIDENCE = 0.5
MAX_LISTED = 50

_NODE_CLASSES = frozenset(
    {FaultClass.GPU_HARDWARE, FaultClass.NETWORK_FABRIC, FaultClass.NODE_LOST}
)
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
_TS = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)")
_RANK_LIST = re.compile(r"\d+")


@dataclass
class _Record:
    """One failure record of a torchelastic error report."""

    root: bool
    host: str | None = None
    rank: int | None = None
    exit_code: int | None = None
    evidence: list[Evidence] = field(default_factory=list)


def _confidence(ev: Evidence, confidences: Mapping[str, float]) -> float:
    if ev.confidence is not None:
        return ev.confidence
    return confidences.get(ev.rule or "", 0.5)


def _launcher_records(evidence: Sequence[Evidence]) -> list[_Record]:
    """Rebuild torchelastic failure records from their matched lines (per file, in order)."""
    records: list[_Record] = []
    section: dict[str | None, bool] = {}
    current: dict[str | None, _Record] = {}
    for ev in evidence:
        rule = ev.rule or ""
        if not rule.startswith("torchelastic.block_"):
            continue
        key = ev.file
        if rule == "torchelastic.block_header":
            section[key] = ev.fields.get("section", "").startswith("Root")
            current.pop(key, None)
            continue
        if key not in section:
            continue
        rec = current.get(key)
        if rule == "torchelastic.block_host" or rec is None:
            rec = _Record(root=section[key])
            current[key] = rec
            records.append(rec)
        rec.evidence.append(ev)
        if rule == "torchelastic.block_host":
            rec.host = ev.fields.get("host")
        elif rule == "torchelastic.block_rank" and ev.rank is not None:
            rec.rank = ev.rank
        elif rule == "torchelastic.block_exitcode":
            try:
                rec.exit_code = int(ev.fields.get("exit_code", ""))
            except ValueError:
                rec.exit_code = None
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


def _ts(text: str | None) -> datetime | None:
    if not text:
        return None
    m = _TS.search(text)
    if m is None:
        return None
    try:
        return datetime.fromisoformat(f"{m.group(1)} {m.group(2)}")
    except ValueError:
        return None


def _is_hang(limit: Evidence, evidence: Sequence[Evidence]) -> bool:
    """A time-limit kill that ended a hang: training had finished, or the log had gone silent."""
    killed_line = limit.line or 0
    finished = [
        e
        for e in evidence
        if e.fault_class is FaultClass.JOB_HANG
        and e.role == "diagnostic"
        and e.file == limit.file
        and 0 < killed_line - (e.line or 0) <= FINISHED_WINDOW_LINES
    ]
    if finished:
        return True
    killed_at = _ts(limit.fields.get("ts"))
    before = _ts(limit.fields.get("previous_line"))
    return (
        killed_at is not None
        and before is not None
        and ((killed_at - before).total_seconds() >= HANG_SILENCE_S)
    )


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
    # The rank whose last completed sequence number is strictly lowest.
    last: dict[int, int] = {}
    for e in timeouts:
        value = e.fields.get("last_completed") or e.fields.get("last_completed2")
        if e.rank is not None and value is not None and value.lstrip("-").isdigit():
            last[e.rank] = min(int(value), last.get(e.rank, int(value)))
    if len(last) >= 2:
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
    """A host that recurs across more failed links than any other."""
    pairs: set[tuple[str, str]] = set()
    for e in roots:
        peer = e.fields.get("peer")
        if e.host and peer:
            a, b = sorted((e.host, peer))
            pairs.add((a, b))
    counts = Counter(end for pair in pairs for end in pair)
    if len(pairs) < 2 or not counts:
        return []
    (top, n), *rest = counts.most_common()
    if n >= 2 and (not rest or rest[0][1] < n):
        return [top]
    return []


def _pick(
    candidates: Sequence[Evidence], confidences: Mapping[str, float]
) -> tuple[FaultClass, float]:
    """The class with the highest confidence; ties go to the class seen first."""
    best: dict[FaultClass, tuple[float, int]] = {}
    for index, ev in enumerate(candidates):
        assert ev.fault_class is not None
        score = _confidence(ev, confidences)
        prev = best.get(ev.fault_class)
        if prev is None or score > prev[0]:
            best[ev.fault_class] = (score, prev[1] if prev else index)
    fault_class = min(best, key=lambda c: (-best[c][0], best[c][1]))
    return fault_class, best[fault_class][0]


def _ordered_unique(values: Sequence[object]) -> list[object]:
    seen: list[object] = []
    for v in values:
        if v is not None and v not in seen:
            seen.append(v)
    return seen


def attribute(
    evidence: Sequence[Evidence],
    *,
    rank_to_host: Mapping[int, str] | None = None,
    confidences: Mapping[str, float] | None = None,
) -> Diagnosis:
    """One :class:`Diagnosis` from all evidence of an interruption (any files, ranks, hosts).

    ``confidences`` maps rule id to rule confidence; without it, the rules of every engine built
    in this process (and the shipped packs) are used. Rules unknown to both weigh 0.5.
    """
    conf = known_confidences() if confidences is None else dict(confidences)
    for code, (_, _, value) in _SIGNAL_EXIT.items():
        conf[f"torchelastic.root_cause_signal{code}"] = value

    hosts: dict[int, str] = dict(rank_to_host or {})
    records = _launcher_records(evidence)
    all_ev = list(evidence)
    for rec in records:
        if rec.rank is not None and rec.host:
            hosts.setdefault(rec.rank, rec.host)
        extra = _record_evidence(rec)
        if extra is not None:
            all_ev.append(extra)
    for ev in all_ev:
        if ev.rank is not None and ev.host and ev.rule and ev.rule.startswith("srun"):
            hosts.setdefault(ev.rank, ev.host)

    roots = [e for e in all_ev if e.role == "root" and e.fault_class is not None]
    cascades = [e for e in all_ev if e.role == "cascade"]
    classed_cascades = [e for e in cascades if e.fault_class is not None]

    if roots:
        fault_class, score = _pick(roots, conf)
        primary = [e for e in roots if e.fault_class is fault_class]
    elif classed_cascades:
        fault_class, score = _pick(classed_cascades, conf)
        score = min(score, 0.7)
        primary = [e for e in classed_cascades if e.fault_class is fault_class]
    else:
        return Diagnosis(
            fault_class=FaultClass.UNKNOWN,
            action=DEFAULT_ACTION[FaultClass.UNKNOWN],
            confidence=0.0,
            evidence=[e for e in all_ev if e.role == "diagnostic"][:MAX_LISTED],
            summary="unknown: no rule matched a failure",
        )

    notes: list[str] = []
    if fault_class is FaultClass.JOB_TIME_LIMIT and _is_hang(primary[0], all_ev):
        fault_class = FaultClass.JOB_HANG
        score = max(0.6, score - 0.25)
        notes.append("the time limit ended a job that had stopped making progress")

    # Corroboration: independent rules agreeing raise confidence a little.
    distinct_rules = {e.rule for e in primary}
    confidence = min(0.99, score + 0.03 * (len(distinct_rules) - 1))

    culprit_ranks: list[int] = []
    culprit_hosts: list[str] = []
    if fault_class is FaultClass.COLLECTIVE_TIMEOUT and not roots:
        culprit_ranks = _collective_culprits(all_ev, cascades)
        culprit_hosts = [hosts[r] for r in culprit_ranks if r in hosts]
    elif fault_class is FaultClass.NETWORK_FABRIC:
        culprit_hosts = _fabric_culprits(primary)
        culprit_ranks = [
            int(r) for r in _ordered_unique([e.rank for e in primary]) if isinstance(r, int)
        ]
    elif fault_class not in _NO_CULPRIT_CLASSES and fault_class is not FaultClass.JOB_HANG:
        culprit_ranks = [
            r for r in _ordered_unique([e.rank for e in primary]) if isinstance(r, int)
        ]
        culprit_hosts = [
            h
            for h in _ordered_unique(
                [e.host or hosts.get(e.rank if e.rank is not None else -1) for e in primary]
            )
            if isinstance(h, str)
        ]
    culprit_gpus = [g for g in _ordered_unique([e.gpu for e in primary]) if isinstance(g, str)]

    action = DEFAULT_ACTION[fault_class]
    if fault_class in _NODE_CLASSES and not culprit_hosts:
        action = RecoveryAction.RESTART
        notes.append("no culprit host identified, so nothing to drain")
    if fault_class is FaultClass.COLLECTIVE_TIMEOUT and culprit_hosts:
        action = RecoveryAction.RESTART
    if confidence < LOW_CONFIDENCE and action is RecoveryAction.STOP:
        action = RecoveryAction.RESTART
        notes.append("evidence too weak to stop the job")

    others = [e for e in roots if e.fault_class is not fault_class]
    listed = (primary + others)[:MAX_LISTED] if roots else primary[:MAX_LISTED]
    cascade_list = sorted(cascades, key=lambda e: (e.rule or "", e.file or "", e.line or 0))
    summary = _summary(
        fault_class,
        confidence,
        culprit_hosts,
        culprit_ranks,
        culprit_gpus,
        primary,
        cascades,
        notes,
    )
    return Diagnosis(
        fault_class=fault_class,
        action=action,
        confidence=round(confidence, 3),
        culprit_hosts=culprit_hosts,
        culprit_ranks=culprit_ranks,
        culprit_gpus=culprit_gpus,
        evidence=listed,
        cascade=cascade_list[:MAX_LISTED] if roots else [],
        summary=summary,
    )


def _summary(
    fault_class: FaultClass,
    confidence: float,
    hosts: Sequence[str],
    ranks: Sequence[int],
    gpus: Sequence[str],
    primary: Sequence[Evidence],
    cascades: Sequence[Evidence],
    notes: Sequence[str],
) -> str:
    parts = [f"{fault_class.value} (confidence {confidence:.2f})"]
    where = []
    if hosts:
        where.append("host " + ", ".join(hosts))
    if ranks:
        where.append("rank " + ", ".join(str(r) for r in ranks))
    if gpus:
        where.append("GPU " + ", ".join(gpus))
    if where:
        parts.append("on " + "; ".join(where))
    first = primary[0]
    loc = f"{first.file}:{first.line}" if first.file and first.line else (first.file or "input")
    parts.append(f"- {first.rule} at {loc}: {first.text[:200].strip()}")
    text = " ".join(parts)
    if cascades:
        counts = Counter(e.rule for e in cascades)
        text += "; cascade: " + ", ".join(f"{rule} x{n}" for rule, n in counts.most_common(5))
    if notes:
        text += "; " + "; ".join(notes)
    return text
