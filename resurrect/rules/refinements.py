"""Time and context that change the class the evidence chose.

A time-limit kill after training reported it had finished, or after a long silence, is a hang.
An interrupt is a cancellation unless its traceback stops in a blocking call, the output had been
silent long before it, or a person interrupted a distributed launcher (SIGINT) with nothing
failed: then the run had hung. A wrapper's "timed out" long before the requested time is a
preemption. A weak host-OOM reading firms up when host memory was seen growing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from resurrect.contracts import Evidence, FaultClass
from resurrect.evidence_trust import LOW_CONFIDENCE
from resurrect.numbers import is_ascii_digits
from resurrect.rules.text import split_prefixes
from resurrect.rules.timeline import silence_before

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
INTERRUPT_RULES = frozenset(
    {"python.keyboard_interrupt", "torchelastic.interrupt_signal", "slurm.cancelled_by_user"}
)
"""Rules whose evidence is a person or a launcher stopping the run."""
BLOCKING_FRAME_RULE = "python.blocking_frame"
LAUNCHER_SIGNAL_RULE = "torchelastic.interrupt_signal"
HOST_MEMORY_RULE = "memory.host_usage_report"
WRAPPER_TIMEOUT_RULES = frozenset({"slurm.time_limit_wrapper", "slurm.wrapper_signal_timeout"})
"""A job wrapper's reading of a signal as the time limit (the scheduler's own word outranks it)."""
LAUNCHER_SIGINT = frozenset({"2", "SIGINT"})
STALLED_PROGRESS_CONFIDENCE = 0.55
"""A person's SIGINT to the launcher right after a progress report: the progress stopped."""
INTERRUPTED_LAUNCHER_CONFIDENCE = 0.5
"""A person's SIGINT to the launcher with no failure and no progress report just before it."""
_PROGRESS_LINE = re.compile(
    r"[0-9]{1,3}%\|"  # a tqdm bar
    r"|\b[0-9]{1,12}/[0-9]{1,12} \[[0-9]"  # "450/1000 [10:23<..."
    r"|(?i:\b(?:epoch|step|iter(?:ation)?|batch|it)\b\s{0,3}[:=#]?\s{0,3}\[?[0-9]{1,12})"
    r"|(?i:\b(?:loss|lr)\s{0,3}[:=]\s{0,3}-?[0-9])"
)
"""A line reporting training progress (a progress bar, a step counter, a loss)."""
_LAUNCHER_WAIT = re.compile(
    r"(?:subprocess|popen_\w+)\.py\", line [0-9]+,? in _?(?:wait|communicate)\b"
)
_UNIT_BYTES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Refinement:
    """A change of the chosen class (or its confidence) made by time and context."""

    from_class: FaultClass
    to_class: FaultClass
    reason: str
    evidence: Evidence | None = None


def time_limit_hang(limit: Evidence, evidence: Sequence[Evidence]) -> str | None:
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


def stopped_in(interrupt: Evidence, evidence: Sequence[Evidence]) -> Evidence | None:
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


def interrupted_hang(
    primary: Sequence[Evidence], evidence: Sequence[Evidence]
) -> tuple[str, Evidence] | None:
    """Why an interrupt ended a hang: where the traceback stopped, or the silence before it."""
    for ev in primary:
        if ev.rule not in INTERRUPT_RULES:
            continue
        frame = stopped_in(ev, evidence)
        if frame is not None:
            return f"the interrupted traceback stops in a blocking call: {frame.text.strip()}", ev
        silent = silence_before(ev)
        if silent is not None and silent >= HANG_SILENCE_S:
            return f"no output for {silent // 60} min before the interrupt", ev
    return None


def stalled_then_interrupted(primary: Sequence[Evidence]) -> tuple[str, Evidence, float] | None:
    """SIGINT (a person at the terminal) to a distributed launcher, with nothing failed: the
    run had stopped moving and the person gave up waiting; the stall is the fault. Firmer when
    the line before the interrupt is a progress report (the progress that stopped). SIGTERM
    (a scheduler, ``kill``) and SIGHUP (a closed session) stay cancellations; so does a bare
    KeyboardInterrupt in the training code, which no launcher reported.

    Returns the reason, the interrupt and the confidence it supports."""
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
                STALLED_PROGRESS_CONFIDENCE,
            )
        return (
            "a person interrupted the distributed launcher (SIGINT) and nothing had failed: "
            "the run had stopped moving",
            ev,
            INTERRUPTED_LAUNCHER_CONFIDENCE,
        )
    return None


def early_timeout(primary: Sequence[Evidence]) -> tuple[str, Evidence] | None:
    """A wrapper's "timed out" long before the requested time: the signal was a preemption."""
    if not primary or any(e.rule not in WRAPPER_TIMEOUT_RULES for e in primary):
        return None  # a scheduler's own TIMEOUT / "DUE TO TIME LIMIT" decides
    for ev in primary:
        ran, requested = ev.fields.get("ran", ""), ev.fields.get("requested", "")
        if not (is_ascii_digits(ran) and is_ascii_digits(requested)):
            continue
        r, q = int(ran), int(requested)
        if r < EARLY_TIMEOUT_FRACTION * q and q - r >= 1:
            return (
                f"the wrapper called it a timeout after {r} of {q} requested minutes: the "
                "signal that stopped it was not the time limit",
                ev,
            )
    return None


def memory_growth(evidence: Sequence[Evidence]) -> tuple[str, Evidence] | None:
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


def refine(
    fault_class: FaultClass,
    score: float,
    primary: Sequence[Evidence],
    evidence: Sequence[Evidence],
) -> tuple[FaultClass, float, list[Refinement]]:
    """The class and score once time and context are weighed, with each change made."""
    refinements: list[Refinement] = []
    if fault_class is FaultClass.JOB_TIME_LIMIT:
        limit = next((e for e in primary if e.rule not in WRAPPER_TIMEOUT_RULES), primary[0])
        if (why := time_limit_hang(limit, evidence)) is not None:
            refinements.append(Refinement(fault_class, FaultClass.JOB_HANG, why, limit))
            fault_class = FaultClass.JOB_HANG
            score = max(0.6, score - 0.25)
        elif (early := early_timeout(primary)) is not None:
            refinements.append(Refinement(fault_class, FaultClass.JOB_PREEMPTED, *early))
            fault_class = FaultClass.JOB_PREEMPTED
            score = max(0.6, score - 0.2)
    elif fault_class is FaultClass.JOB_CANCELLED:
        if (hang := interrupted_hang(primary, evidence)) is not None:
            refinements.append(Refinement(fault_class, FaultClass.JOB_HANG, *hang))
            fault_class = FaultClass.JOB_HANG
            score = max(score, 0.6)
        elif (stall := stalled_then_interrupted(primary)) is not None:
            why, interrupt, floor = stall
            refinements.append(Refinement(fault_class, FaultClass.JOB_HANG, why, interrupt))
            fault_class = FaultClass.JOB_HANG
            score = max(score, floor)
    elif fault_class is FaultClass.MEMORY_HOST_OOM and score < LOW_CONFIDENCE:
        if (growth := memory_growth(evidence)) is not None:
            refinements.append(Refinement(fault_class, fault_class, *growth))
            score = 0.55
    return fault_class, score, refinements
