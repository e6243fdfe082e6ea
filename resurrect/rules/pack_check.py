"""Checking rule packs: validate them and run every rule's own examples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from resurrect.contracts import Evidence
from resurrect.rules.engine import CompiledRule, RuleEngine
from resurrect.rules.loader import expand_paths, load_packs, shipped_pack_paths


@dataclass(frozen=True)
class ExampleFailure:
    """One example that did not behave as its rule says."""

    file: Path
    rule: str
    example: str
    problem: str

    def __str__(self) -> str:
        return f"{self.file}: rule {self.rule}: {self.problem}: {self.example!r}"


def _observed(ev: Evidence, name: str) -> str | None:
    if name in ev.fields:
        return ev.fields[name]
    value = {"rank": ev.rank, "host": ev.host, "gpu": ev.gpu}.get(name)
    return None if value is None else str(value)


def check_rule(engine: RuleEngine, compiled: CompiledRule) -> list[ExampleFailure]:
    """Run one rule's examples through ``engine`` (every kind the rule declares)."""
    rule = compiled.rule
    failures: list[ExampleFailure] = []
    for kind in rule.kinds:
        for example in rule.examples.match_examples():
            hits = [e for e in engine.scan_line(example.text, kind=kind) if e.rule == rule.id]
            if not hits:
                failures.append(
                    ExampleFailure(
                        compiled.source,
                        rule.id,
                        example.text,
                        f"match example did not match (kind {kind.value})",
                    )
                )
                continue
            for name, want in example.fields.items():
                got = _observed(hits[0], name)
                if got != want:
                    failures.append(
                        ExampleFailure(
                            compiled.source,
                            rule.id,
                            example.text,
                            f"field {name}: expected {want!r}, got {got!r}",
                        )
                    )
        for text in rule.examples.no_match:
            if any(e.rule == rule.id for e in engine.scan_line(text, kind=kind)):
                failures.append(
                    ExampleFailure(
                        compiled.source,
                        rule.id,
                        text,
                        f"no_match example matched (kind {kind.value})",
                    )
                )
    return failures


def check_packs(
    paths: Sequence[Path] = (), *, include_shipped: bool = True
) -> list[ExampleFailure]:
    """Load packs (RuleError on an invalid one) and run all their rules' examples."""
    files = [*(shipped_pack_paths() if include_shipped else []), *expand_paths(paths)]
    packs = load_packs(files)
    engine = RuleEngine([(path, rule) for path, pack in packs for rule in pack.rules])
    failures: list[ExampleFailure] = []
    for compiled in engine.rules:
        failures.extend(check_rule(engine, compiled))
    return failures
