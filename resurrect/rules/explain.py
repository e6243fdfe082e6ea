"""Why a diagnosis came out as it did: ``resurrect diagnose --explain``.

An :class:`Explanation` is read off the same :class:`~resurrect.rules.attribution.Attribution`
that :func:`~resurrect.rules.attribution.attribute` turns into a diagnosis, so it cannot
disagree with it. It states

* the rule that fired: pack, rule id, file and line of the strongest line of the chosen class;
* every other candidate class and why it lost: a *cascade* (a symptom, and root evidence
  exists), *weaker* (a lower rule confidence), or *later* (as strong, but first seen after);
* the refinements that time and context made (an interrupt that ended a hang, a time limit
  after a long silence, a wrapper's early "timed out");
* what evidence would change the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from resurrect.contracts import Evidence, FaultClass, RecoveryAction
from resurrect.evidence_trust import LOW_CONFIDENCE, NODE_CLASSES
from resurrect.rules.attribution import Attribution, Candidate, weigh
from resurrect.rules.engine import RuleEngine, default_engine
from resurrect.rules.refinements import HANG_SILENCE_S, WRAPPER_TIMEOUT_RULES
from resurrect.rules.unrecognised import fatal_shape


@dataclass(frozen=True)
class RuleRef:
    """A rule as it fired on one line."""

    pack: str
    rule: str
    file: str | None
    line: int | None
    text: str

    @property
    def where(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or "input"

    def as_json(self) -> dict[str, Any]:
        return {
            "pack": self.pack,
            "rule": self.rule,
            "file": self.file,
            "line": self.line,
            "text": self.text,
        }


@dataclass(frozen=True)
class Alternative:
    """A class the evidence also supported, and why it lost."""

    fault_class: FaultClass
    role: str
    confidence: float
    fired: RuleRef
    lost_because: str
    """``cascade``, ``weaker`` or ``later``."""
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {
            "fault_class": self.fault_class.value,
            "role": self.role,
            "confidence": round(self.confidence, 3),
            "lost_because": self.lost_because,
            "reason": self.reason,
            "fired": self.fired.as_json(),
        }


@dataclass(frozen=True)
class Explanation:
    """The reasons behind one diagnosis."""

    fault_class: FaultClass
    confidence: float
    action: RecoveryAction
    decided_by: str
    fired: RuleRef | None
    refinements: list[str] = field(default_factory=list)
    alternatives: list[Alternative] = field(default_factory=list)
    would_change: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unrecognised: RuleRef | None = None
    """When nothing decided: the line that looked decisive, whose wording no rule knows."""
    unrecognised_shape: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "fault_class": self.fault_class.value,
            "confidence": self.confidence,
            "action": self.action.value,
            "decided_by": self.decided_by,
            "fired": self.fired.as_json() if self.fired else None,
            "refinements": self.refinements,
            "alternatives": [a.as_json() for a in self.alternatives],
            "would_change": self.would_change,
            "notes": self.notes,
            "unrecognised": (
                {**self.unrecognised.as_json(), "shape": self.unrecognised_shape}
                if self.unrecognised
                else None
            ),
        }

    def lines(self) -> list[str]:
        """The explanation as text, one statement per line."""
        out = [
            f"decision: {self.fault_class.value} (confidence {self.confidence:.2f}, action "
            f"{self.action.value}), decided by {_DECIDED_BY[self.decided_by]}"
        ]
        if self.fired:
            out.append(
                f"  fired: rule {self.fired.rule} (pack {self.fired.pack}) at {self.fired.where}: "
                f"{self.fired.text[:160].strip()}"
            )
        if self.unrecognised:
            out.append(
                f"  decisive-looking line at {self.unrecognised.where} - no rule for this wording"
                f" ({self.unrecognised_shape}): {self.unrecognised.text[:160].strip()}"
            )
        out.extend(f"  refined: {r}" for r in self.refinements)
        for alt in self.alternatives:
            out.append(
                f"  lost: {alt.fault_class.value} ({alt.lost_because}) - {alt.reason}; "
                f"rule {alt.fired.rule} (pack {alt.fired.pack}) at {alt.fired.where}"
            )
        out.extend(f"  note: {n}" for n in self.notes)
        out.extend(f"  would change: {w}" for w in self.would_change)
        return out


_DECIDED_BY = {
    "root": "root-cause evidence",
    "cascade": "symptoms only (no root-cause line)",
    "context": "context alone (a traceback stopped in a blocking call)",
    "none": "nothing (no rule matched a failure)",
}


def _ref(ev: Evidence, packs: Mapping[str, str]) -> RuleRef:
    rule = ev.rule or "?"
    pack = packs.get(rule) or (
        "torchelastic (launcher record)"
        if rule.startswith("torchelastic.root_cause")
        else rule.split(".", 1)[0]
    )
    return RuleRef(pack=pack, rule=rule, file=ev.file, line=ev.line, text=ev.text)


def _why_lost(winner: Candidate, other: Candidate) -> tuple[str, str]:
    if other.role == "cascade" and winner.role == "root":
        return (
            "cascade",
            f"a symptom ({other.count} line(s)); root-cause evidence for "
            f"{winner.fault_class.value} outranks any cascade",
        )
    if other.score < winner.score:
        return (
            "weaker",
            f"its strongest rule weighs {other.score:.2f}, less than {winner.score:.2f}",
        )
    return (
        "later",
        f"as strong ({other.score:.2f}), but first seen after {winner.fault_class.value}",
    )


def _would_change(attribution: Attribution) -> list[str]:
    out: list[str] = []
    cls = attribution.fault_class
    winner = attribution.candidates[0] if attribution.candidates else None
    if attribution.decided_by == "none":
        taught = (
            [
                f"a rule for the wording of {fatal_shape(attribution.unrecognised)} (a pack of "
                "your own with --rules, or a shipped one) would give it a class"
            ]
            if attribution.unrecognised
            else []
        )
        return [
            *taught,
            "any line a rule recognises as a failure (see `resurrect rules check` for the packs)",
            "a traceback that stops in a blocking call would point at a hang",
        ]
    if attribution.decided_by == "context":
        return [
            "any failure line (an exception, an OOM, a hardware error) would outrank the stall",
            "an interrupt or a time-limit kill after the stall would confirm a hang",
        ]
    if winner is not None:
        rivals = [c for c in attribution.candidates[1:] if c.role == winner.role]
        if rivals:
            r = rivals[0]
            out.append(
                f"a {r.fault_class.value} line weighing more than {winner.score:.2f} (its best "
                f"so far, {r.strongest.rule}, weighs {r.score:.2f}) would make it "
                f"{r.fault_class.value}"
            )
    if attribution.decided_by == "cascade":
        out.append(
            "any root-cause line (an Xid, a NET/IB error, an OOM, a CUDA error, an exception "
            "traceback, a scheduler state) would outrank these symptoms; the output of the rank "
            "that stopped first usually holds it"
        )
    from_interrupt = any(r.from_class is FaultClass.JOB_CANCELLED for r in attribution.refinements)
    from_limit = any(r.from_class is FaultClass.JOB_TIME_LIMIT for r in attribution.refinements)
    if cls is FaultClass.JOB_CANCELLED:
        out.append(
            "a traceback that stops in a blocking call (a queue get, a lock, a barrier) right "
            f"before the interrupt, or {HANG_SILENCE_S // 60} min of silence before it, would "
            "make it job.hang"
        )
    elif cls is FaultClass.JOB_HANG and from_interrupt:
        out.append(
            "a traceback that ends in an ordinary exception, or output right up to the "
            "interrupt, would make it job.cancelled"
        )
    elif cls is FaultClass.JOB_HANG and from_limit:
        out.append("output right up to the kill would make it job.time_limit")
    elif cls is FaultClass.JOB_TIME_LIMIT:
        if all(e.rule in WRAPPER_TIMEOUT_RULES for e in attribution.primary):
            out.append(
                "the scheduler's own word (a Slurm 'DUE TO PREEMPTION' line or PREEMPTED "
                "state) would make it job.preempted; the wrapper only reads a signal"
            )
        out.append(
            f"a 'training finished' line or {HANG_SILENCE_S // 60} min of silence before the "
            "kill would make it job.hang"
        )
    elif cls is FaultClass.JOB_PREEMPTED and attribution.refinements:
        out.append("a Slurm 'DUE TO TIME LIMIT' line or TIMEOUT state would make it job.time_limit")
    if cls is FaultClass.MEMORY_HOST_OOM and attribution.confidence < LOW_CONFIDENCE:
        out.append(
            "an OOM-killer line (kernel 'Out of memory: Killed process', slurmstepd oom_kill, "
            "OOMKilled) or host memory seen growing would confirm it and stop the job; until "
            "then it is restarted"
        )
    if cls in NODE_CLASSES and not attribution.culprit_hosts:
        out.append(
            "a line naming the host (an NCCL 'host:pid:tid' prefix, srun -l, a syslog host, a "
            "torchelastic Root Cause record) would let resurrect drain that node"
        )
    if cls is FaultClass.NODE_LOST and any(e.fields.get("peer") for e in attribution.primary):
        out.append(
            "a root cause printed by the lost peer itself (an OOM, a SIGKILL, a crash, an "
            "exception) would explain its exit instead; errors naming several different peers "
            "would not single out one node"
        )
    if cls is FaultClass.COLLECTIVE_TIMEOUT and not attribution.culprit_ranks:
        out.append(
            "per-rank watchdog progress (last completed work) or a desync report would single "
            "out the rank that stopped participating"
        )
    if cls is FaultClass.CUDA_ERROR:
        out.append(
            "a hardware Xid (79, 48, 94, 95, 119) on the same node would make it gpu.hardware"
        )
    return out


def explanation_of(attribution: Attribution, packs: Mapping[str, str]) -> Explanation:
    """Read an explanation off an attribution; ``packs`` maps rule id to pack name."""
    winner = attribution.candidates[0] if attribution.candidates else None
    fired: RuleRef | None = None
    if winner is not None:
        fired = _ref(winner.strongest, packs)
    elif attribution.primary:
        fired = _ref(attribution.primary[0], packs)
    alternatives: list[Alternative] = []
    if winner is not None:
        for other in attribution.candidates[1:]:
            lost_because, reason = _why_lost(winner, other)
            alternatives.append(
                Alternative(
                    fault_class=other.fault_class,
                    role=other.role,
                    confidence=other.score,
                    fired=_ref(other.strongest, packs),
                    lost_because=lost_because,
                    reason=reason,
                )
            )
    refinements = [
        (
            f"{r.from_class.value} -> {r.to_class.value}: {r.reason}"
            if r.from_class is not r.to_class
            else f"{r.to_class.value} confirmed: {r.reason}"
        )
        for r in attribution.refinements
    ]
    notes = [n for n in attribution.notes if n not in {r.reason for r in attribution.refinements}]
    decisive = attribution.unrecognised
    if decisive is not None:  # shown as the decisive-looking line, not again as a note
        notes = [n for n in notes if not n.startswith("no rule for this wording")]
    return Explanation(
        fault_class=attribution.fault_class,
        confidence=attribution.confidence,
        action=attribution.action,
        decided_by=attribution.decided_by,
        fired=fired,
        refinements=refinements,
        alternatives=alternatives,
        would_change=_would_change(attribution),
        notes=notes,
        unrecognised=_ref(decisive, packs) if decisive else None,
        unrecognised_shape=fatal_shape(decisive) if decisive else None,
    )


def explain(
    evidence: Sequence[Evidence],
    *,
    engine: RuleEngine | None = None,
    rank_to_host: Mapping[int, str] | None = None,
) -> Explanation:
    """Explain the diagnosis of ``evidence`` as ``engine`` (shipped packs by default) weighs it."""
    engine = engine or default_engine()
    attribution = weigh(evidence, rank_to_host=rank_to_host, confidences=engine.confidences())
    return explanation_of(attribution, engine.packs())
