"""From many matched lines to one diagnosis.

The rules say what each line means on its own; attribution weighs them together:

1. **Root beats cascade.** The primary class is chosen among ``root`` evidence: per class the
   highest rule confidence, ties going to the class observed first. Cascade evidence
   (collective timeouts, communicator aborts, SIGABRT teardown, launcher summaries, interrupts)
   decides only when there is no root evidence at all. A storage refusal printed by a shell
   step or as a warning, with a failure of another class after it, is one the job outlived
   (:mod:`.outlived`): it roots nothing.
2. **Launcher reports.** torchelastic's "Root Cause (first observed failure)" record gives the
   failing rank, its host and exit code. Records become a rank-to-host map; a root-cause record
   that died of a signal is evidence in its own right (SIGSEGV/SIGBUS/... crash; SIGKILL a
   probable host OOM; SIGABRT teardown, a cascade); records listed under "Failures" are cascade.
3. **Collective timeouts** point at the rank that stopped participating: one that never reported
   while the others did, the one whose last completed sequence number is lowest, or the ranks the
   desync report names - unless that is every rank, which identifies nobody.
4. **Fabric errors** name both ends of a link; a host is blamed only when it recurs across
   more pairs than any other, or when one host alone reports a failure of its own adapter or
   NVLink. **A lost peer** (survivors see their connection closed by one peer) blames that peer;
   a "peer" that is the reporting host itself (by name or as its ``-ib`` interface) is a process
   on that host, never a lost node, like a loopback peer.
5. **Time and context.** A time-limit kill after training reported it had finished, or after a
   long silence, is a hang. An interrupt (Ctrl-C, SIGINT/SIGTERM to the launcher, scancel) is a
   cancellation - unless the traceback it produced stops in a blocking call (a queue ``get``, a
   lock, a barrier), the output had been silent for long before it, or a person's SIGINT reached
   a distributed launcher with nothing failed: then the run had hung. A
   wrapper's "job has timed out" long before the requested time is a preemption. A SIGKILL with
   no OOM line is a probable host OOM at low confidence, firmer when the job's host memory was
   seen growing; a low-confidence diagnosis never stops a job (its action becomes restart).
   Hardware classes without a culprit host cannot drain anything, so their action is restart.

:func:`weigh` runs these steps in order - gather the evidence (:mod:`.launcher_records`), rank
the candidate classes, choose root over cascade, refine by time and context
(:mod:`.refinements`), find the culprits (:mod:`.culprits`), propose an action - and returns
each step's result as an :class:`Attribution`; :func:`attribute` turns it into a
:class:`~resurrect.contracts.Diagnosis` and :mod:`resurrect.rules.explain` into an explanation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from resurrect.carry_over import carry_over
from resurrect.contracts import (
    DEFAULT_ACTION,
    Diagnosis,
    Evidence,
    FaultClass,
    RecoveryAction,
)
from resurrect.evidence_trust import proposed_action, same_host
from resurrect.rules.culprits import MAX_LISTED, find_culprits
from resurrect.rules.engine import known_confidences
from resurrect.rules.launcher_records import (
    EXIT_REPORT_RULES,
    SIGNAL_EXIT,
    LauncherRecord,
    first_failure,
    launcher_records,
    process_hosts,
    record_evidence,
)
from resurrect.rules.outlived import outlived_refusals
from resurrect.rules.refinements import BLOCKING_FRAME_RULE, Refinement, refine
from resurrect.rules.unrecognised import fatal_shape, first_unrecognised

NOTHING_MATCHED = "no rule matched a failure"
CASCADE_CONFIDENCE_CAP = 0.7
"""A class chosen from cascade evidence alone is never surer than this."""
CORROBORATION_STEP = 0.03
"""How much each further distinct rule agreeing on the chosen class adds to its confidence."""


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


@dataclass
class Attribution:
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
    unrecognised: Evidence | None = None
    """When nothing decided: the first fatal-looking line, whose wording no rule has a class for."""


@dataclass
class _Gathered:
    """All evidence of an interruption, with what the launchers report about its ranks."""

    evidence: list[Evidence]
    """The evidence given, then launcher records that died of a signal, as evidence."""
    records: list[LauncherRecord]
    hosts: dict[int, str]
    """Rank to host: as given, then as launcher records, srun, exit reports and NCCL name them."""


@dataclass(frozen=True)
class _Choice:
    """The class the evidence chose before time and context, and on which evidence."""

    winner: Candidate
    score: float
    primary: list[Evidence]
    decided_by: str


def rule_confidence(ev: Evidence, confidences: Mapping[str, float]) -> float:
    if ev.confidence is not None:
        return ev.confidence
    return confidences.get(ev.rule or "", 0.5)


def _rule_confidences(confidences: Mapping[str, float] | None) -> dict[str, float]:
    """Rule id to confidence: ``confidences``, else every known rule's; launcher records that
    died of a signal weigh as :data:`~.launcher_records.SIGNAL_EXIT` says."""
    conf = known_confidences() if confidences is None else dict(confidences)
    for code, (_, _, value) in SIGNAL_EXIT.items():
        conf[f"torchelastic.root_cause_signal{code}"] = value
    return conf


def _gather(evidence: Sequence[Evidence], rank_to_host: Mapping[int, str] | None) -> _Gathered:
    """Step 1: the evidence, the launcher's failure records, and every rank's host."""
    hosts: dict[int, str] = dict(rank_to_host or {})
    records = launcher_records(evidence)
    processes = process_hosts(evidence)
    pid_hosts = processes.hosts_by_pid
    all_ev = [
        _with_process_rank(ev, processes.ranks_by_process)
        for ev in evidence
        if not _local_lost_peer(ev)
    ]
    for rec in records:
        if rec.host is None and rec.pid is not None:
            rec.host = pid_hosts.get(rec.pid)
        if rec.rank is not None and rec.host:
            hosts.setdefault(rec.rank, rec.host)
        extra = record_evidence(rec)
        if extra is not None:
            all_ev.append(extra)
    for ev in all_ev:
        if ev.rank is not None and ev.host and ev.rule and ev.rule.startswith("srun"):
            hosts.setdefault(ev.rank, ev.host)
    for ev in all_ev:  # an exit report's pid, on a host NCCL named
        pid = ev.fields.get("pid")
        if ev.rule in EXIT_REPORT_RULES and ev.rank is not None and pid in pid_hosts:
            hosts.setdefault(ev.rank, pid_hosts[pid])
    for rank, host in processes.hosts_by_rank.items():
        hosts.setdefault(rank, host)
    return _Gathered(all_ev, records, hosts)


def _with_process_rank(ev: Evidence, ranks: Mapping[str, int]) -> Evidence:
    """A failure line NCCL printed (``host:pid:tid [dev]``, no rank of its own) names the global
    rank that process's communicator init line gave it."""
    pid = ev.fields.get("pid")
    if ev.fault_class is None or ev.rank is not None or not ev.host or not pid:
        return ev
    rank = ranks.get(f"{ev.host}:{pid}")
    return ev if rank is None else ev.model_copy(update={"rank": rank})


def _local_lost_peer(ev: Evidence) -> bool:
    """A lost-peer line whose peer is the reporting host itself: a process on that host closed
    the connection, which says nothing about a node."""
    peer = ev.fields.get("peer")
    return (
        ev.fault_class is FaultClass.NODE_LOST
        and peer is not None
        and ev.host is not None
        and same_host(ev.host, peer)
    )


def _candidates(
    pool: Sequence[Evidence], role: str, confidences: Mapping[str, float]
) -> list[Candidate]:
    """Per class: the highest confidence and where the class was first seen; best first."""
    best: dict[FaultClass, tuple[float, int, Evidence, int]] = {}
    for index, ev in enumerate(pool):
        assert ev.fault_class is not None
        score = rule_confidence(ev, confidences)
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


def _choose(
    roots: Sequence[Evidence],
    classed_cascades: Sequence[Evidence],
    root_candidates: Sequence[Candidate],
    cascade_candidates: Sequence[Candidate],
) -> _Choice | None:
    """Step 3: root beats cascade; cascade evidence decides only when there is no root."""
    if root_candidates:
        winner = root_candidates[0]
        primary = [e for e in roots if e.fault_class is winner.fault_class]
        return _Choice(winner, winner.score, primary, "root")
    if cascade_candidates:
        winner = cascade_candidates[0]
        primary = [e for e in classed_cascades if e.fault_class is winner.fault_class]
        return _Choice(winner, min(winner.score, CASCADE_CONFIDENCE_CAP), primary, "cascade")
    return None


def _undecided(gathered: _Gathered, cascades: list[Evidence]) -> Attribution:
    """No class chosen: a stall when a traceback stops in a blocking call, else unknown (with
    the rank the launcher saw fail first)."""
    frames = [e for e in gathered.evidence if e.rule == BLOCKING_FRAME_RULE]
    if frames:  # nothing failed, and a traceback stops in a blocking call: a dump of a stall
        return Attribution(
            fault_class=FaultClass.JOB_HANG,
            confidence=0.4,
            action=DEFAULT_ACTION[FaultClass.JOB_HANG],
            decided_by="context",
            candidates=[],
            primary=frames,
            cascades=cascades,
            roots=[],
            notes=["nothing failed, and a traceback stops in a blocking call"],
            evidence=gathered.evidence,
        )
    first = first_failure(gathered.records, gathered.evidence)
    host = (first[1] or gathered.hosts.get(first[0])) if first else None
    decisive = first_unrecognised(gathered.evidence)
    return Attribution(
        fault_class=FaultClass.UNKNOWN,
        confidence=0.0,
        action=DEFAULT_ACTION[FaultClass.UNKNOWN],
        decided_by="none",
        candidates=[],
        primary=[],
        cascades=cascades,
        roots=[],
        notes=[
            f"no rule for this wording ({fatal_shape(decisive)}): {decisive.text[:200].strip()}"
            if decisive is not None
            else NOTHING_MATCHED
        ],
        unrecognised=decisive,
        culprit_ranks=[first[0]] if first else [],
        culprit_hosts=[host] if host else [],
        evidence=gathered.evidence,
    )


def _corroborated(score: float, primary: Sequence[Evidence]) -> float:
    """Step 5: independent rules agreeing on the class raise its confidence a little."""
    distinct_rules = {e.rule for e in primary}
    return min(0.99, score + CORROBORATION_STEP * (len(distinct_rules) - 1))


def weigh(
    evidence: Sequence[Evidence],
    *,
    rank_to_host: Mapping[int, str] | None = None,
    confidences: Mapping[str, float] | None = None,
) -> Attribution:
    """Weigh all evidence of an interruption (any files, ranks, hosts) into one attribution.

    ``confidences`` maps rule id to rule confidence; without it, the rules of every engine built
    in this process (and the shipped packs) are used. Rules unknown to both weigh 0.5.
    """
    conf = _rule_confidences(confidences)
    gathered = _gather(evidence, rank_to_host)
    all_ev = gathered.evidence
    roots = [e for e in all_ev if e.role == "root" and e.fault_class is not None]
    outlived = outlived_refusals(roots, all_ev)
    set_aside = {id(e) for e in outlived}
    roots = [e for e in roots if id(e) not in set_aside]
    cascades = [e for e in all_ev if e.role == "cascade"]
    classed_cascades = [e for e in cascades if e.fault_class is not None]
    root_candidates = _candidates(roots, "root", conf)
    cascade_candidates = _candidates(classed_cascades, "cascade", conf)
    choice = _choose(roots, classed_cascades, root_candidates, cascade_candidates)
    if choice is None:
        return _undecided(gathered, cascades)

    fault_class, score, refinements = refine(
        choice.winner.fault_class, choice.score, choice.primary, all_ev
    )
    notes = [r.reason for r in refinements]
    if outlived:
        notes.append(
            "the job outlived a set-up refusal before the failure: "
            + outlived[0].text[:120].strip()
        )
    confidence = _corroborated(score, choice.primary)
    culprits = find_culprits(
        fault_class,
        choice.primary,
        evidence=all_ev,
        cascades=cascades,
        has_roots=bool(roots),
        records=gathered.records,
        hosts=gathered.hosts,
        weight=lambda e: rule_confidence(e, conf),
        teardown=choice.decided_by == "cascade",
    )
    if culprits.confidence_cap is not None:
        confidence = min(confidence, culprits.confidence_cap)
    notes.extend(culprits.notes)
    action, why = proposed_action(fault_class, culprits.hosts, confidence)
    if why is not None:
        notes.append(why)

    return Attribution(
        fault_class=fault_class,
        confidence=round(confidence, 3),
        action=action,
        decided_by=choice.decided_by,
        candidates=root_candidates + cascade_candidates,
        primary=choice.primary,
        cascades=cascades,
        roots=roots,
        refinements=refinements,
        notes=notes,
        culprit_hosts=culprits.hosts,
        culprit_ranks=culprits.ranks,
        culprit_gpus=culprits.gpus,
        evidence=all_ev,
    )


def attribute(
    evidence: Sequence[Evidence],
    *,
    rank_to_host: Mapping[int, str] | None = None,
    confidences: Mapping[str, float] | None = None,
) -> Diagnosis:
    """One :class:`Diagnosis` from all evidence of an interruption (any files, ranks, hosts):
    what :func:`weigh` makes of it (``confidences`` as there)."""
    return diagnosis_of(weigh(evidence, rank_to_host=rank_to_host, confidences=confidences))


def diagnosis_of(attribution: Attribution) -> Diagnosis:
    """The :class:`Diagnosis` an attribution amounts to."""
    if attribution.decided_by == "none":
        decisive = attribution.unrecognised
        diagnostics = [e for e in attribution.evidence if e.role == "diagnostic" and e != decisive]
        return Diagnosis(
            fault_class=FaultClass.UNKNOWN,
            action=attribution.action,
            confidence=0.0,
            culprit_ranks=attribution.culprit_ranks,
            culprit_hosts=attribution.culprit_hosts,
            evidence=([decisive] if decisive else []) + diagnostics[: MAX_LISTED - 1],
            summary="unknown: "
            + (
                f"no rule for this wording: {_located(decisive)}: {decisive.text[:200].strip()}"
                if decisive is not None
                else NOTHING_MATCHED
            )
            + (
                f"; the launcher reports rank {attribution.culprit_ranks[0]} failed first"
                + (f" on {attribution.culprit_hosts[0]}" if attribution.culprit_hosts else "")
                if attribution.culprit_ranks
                else ""
            ),
        )
    primary = attribution.primary
    others = [e for e in attribution.roots if e.fault_class is not primary[0].fault_class]
    listed = (primary + others)[:MAX_LISTED] if attribution.roots else primary[:MAX_LISTED]
    cascade_list = sorted(
        attribution.cascades, key=lambda e: (e.rule or "", e.file or "", e.line or 0)
    )
    return carry_over(
        attribution,
        Diagnosis,
        evidence=listed,
        cascade=cascade_list[:MAX_LISTED] if attribution.roots else [],
        summary=_summary(attribution),
    )


def _located(ev: Evidence) -> str:
    return f"{ev.file}:{ev.line}" if ev.file and ev.line else (ev.file or "input")


def _summary(attribution: Attribution) -> str:
    parts = [f"{attribution.fault_class.value} (confidence {attribution.confidence:.2f})"]
    where = []
    if attribution.culprit_hosts:
        where.append("host " + ", ".join(attribution.culprit_hosts))
    if attribution.culprit_ranks:
        where.append("rank " + ", ".join(str(r) for r in attribution.culprit_ranks))
    if attribution.culprit_gpus:
        where.append("GPU " + ", ".join(attribution.culprit_gpus))
    if where:
        parts.append("on " + "; ".join(where))
    first = attribution.primary[0]
    parts.append(f"- {first.rule} at {_located(first)}: {first.text[:200].strip()}")
    text = " ".join(parts)
    if attribution.cascades:
        counts = Counter(e.rule for e in attribution.cascades)
        text += "; cascade: " + ", ".join(f"{rule} x{n}" for rule, n in counts.most_common(5))
    if attribution.notes:
        text += "; " + "; ".join(attribution.notes)
    return text
