"""Offline diagnosis: scan files or lines with an engine, then attribute."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from resurrect.contracts import Diagnosis, Evidence, SignalKind
from resurrect.rules.attribution import attribute
from resurrect.rules.engine import RuleEngine, default_engine


def diagnose_files(
    paths: Sequence[Path],
    *,
    engine: RuleEngine | None = None,
    rank_to_host: Mapping[int, str] | None = None,
    kind: SignalKind = SignalKind.JOB_LOG,
) -> Diagnosis:
    """Diagnose one interruption from its log files (OSError propagates; the CLI reports it)."""
    engine = engine or default_engine()
    evidence: list[Evidence] = []
    for path in paths:
        evidence.extend(engine.scan_file(Path(path), kind=kind))
    return attribute(evidence, rank_to_host=rank_to_host, confidences=engine.confidences())


def diagnose_lines(
    lines: Iterable[str | bytes],
    *,
    file: str | None = None,
    engine: RuleEngine | None = None,
    rank_to_host: Mapping[int, str] | None = None,
    kind: SignalKind = SignalKind.JOB_LOG,
) -> Diagnosis:
    """Diagnose one interruption from lines of text (e.g. a log already in memory, or stdin)."""
    engine = engine or default_engine()
    evidence = engine.scan_lines(lines, kind=kind, file=file)
    return attribute(evidence, rank_to_host=rank_to_host, confidences=engine.confidences())
