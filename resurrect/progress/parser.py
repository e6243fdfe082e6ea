"""One printed line -> what it says about training progress.

Lines are cleaned and bounded, and launcher prefixes removed, exactly as for the failure
rules (:mod:`resurrect.rules.text`), so a ``[rank3]:`` prefix names the rank. Healthy lines
that contain no rule's literal cost one substring search per literal."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from resurrect.progress.loader import load_progress_rules
from resurrect.progress.models import Phase, ProgressRule
from resurrect.rules.text import clean, split_prefixes


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """What one line told: a training step, or the start of an evaluation or a save."""

    rule: str
    trainer: str
    phase: Phase
    step: int | None = None
    total: int | None = None
    step_time_s: float | None = None
    rank: int | None = None
    host: str | None = None


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _step_time(groups: dict[str, str | None]) -> float | None:
    """Seconds per step from whichever unit the line printed."""
    if (ms := _number(groups.get("step_time_ms"))) is not None:
        return ms / 1000.0
    if (seconds := _number(groups.get("step_time_s"))) is not None:
        return seconds
    if (seconds := _number(groups.get("s_per_it"))) is not None:
        return seconds
    rate = _number(groups.get("it_per_s"))
    return 1.0 / rate if rate else None


def _integer(text: str | None) -> int | None:
    value = _number(text)
    return int(value) if value is not None and value == int(value) else None


class ProgressParser:
    """Reads progress from lines with a set of progress rules (first matching rule wins)."""

    def __init__(self, rules: Sequence[ProgressRule]) -> None:
        self.rules = [(rule, re.compile(rule.pattern)) for rule in rules]
        self.literals = sorted({lit for rule in rules for lit in rule.literal})

    def parse(self, line: str | bytes) -> ProgressEvent | None:
        text = clean(line)
        lowered = text.lower()
        if not any(lit in lowered for lit in self.literals):
            return None
        prefix = split_prefixes(text)
        body_lower = prefix.body.lower()
        for rule, regex in self.rules:
            if not any(lit in body_lower for lit in rule.literal):
                continue
            matches = list(regex.finditer(prefix.body))
            if not matches:
                continue
            last = matches[-1]
            groups = last.groupdict()
            return ProgressEvent(
                rule=rule.id,
                trainer=rule.trainer,
                phase=rule.phase,
                step=_integer(groups.get("step")),
                total=_integer(groups.get("total")),
                step_time_s=_step_time(groups),
                rank=prefix.rank,
                host=prefix.host,
            )
        return None


@lru_cache(maxsize=1)
def shipped_parser() -> ProgressParser:
    """A parser over the shipped progress packs (built once per process)."""
    return ProgressParser(load_progress_rules())


def check_rules(rules: Sequence[ProgressRule]) -> list[str]:
    """Run every rule's examples: each match example must be read by that rule, as stated;
    each no-match example must not be matched by that rule. Returns the problems found."""
    problems: list[str] = []
    for rule in rules:
        alone = ProgressParser([rule])
        for example in rule.examples.match_examples():
            event = alone.parse(example.text)
            if event is None:
                problems.append(f"{rule.id}: does not match its example {example.text!r}")
                continue
            for name in ("step", "total", "rank"):
                want = getattr(example, name)
                if want is not None and getattr(event, name) != want:
                    got = getattr(event, name)
                    problems.append(f"{rule.id}: {name} {got!r} != {want!r} in {example.text!r}")
            want_time, got_time = example.step_time_s, event.step_time_s
            if want_time is not None and (
                got_time is None or not math.isclose(got_time, want_time, rel_tol=1e-3)
            ):
                problems.append(
                    f"{rule.id}: step_time_s {got_time!r} != {want_time!r} in {example.text!r}"
                )
        for text in rule.examples.no_match:
            if alone.parse(text) is not None:
                problems.append(f"{rule.id}: matches its no-match example {text!r}")
    return problems
