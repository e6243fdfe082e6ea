"""``resurrect diagnose`` and ``resurrect rules check``.

``resurrect diagnose [--json] [--explain] [--rules PATH]... FILE... | -`` scans log files
(``-`` reads stdin) and prints one diagnosis: a short summary, or with ``--json`` an object with
``fault_class``, ``action``, ``confidence``, ``culprit_hosts``, ``culprit_ranks``,
``culprit_gpus``, ``evidence`` and ``cascade`` (each ``{file, line, text, rule, role, ...}``)
and ``summary``. ``--explain`` adds why (:mod:`resurrect.rules.explain`): the rule that fired
(pack, id, line), why every other candidate class lost (cascade, weaker, later), what time and
context changed, and what evidence would change the answer; with ``--json`` as ``explain``.
A file that is missing, unreadable, binary or not a regular file (a FIFO, a device, a
symlink: refused without blocking) is reported on stderr; the others are still diagnosed
(exit 1 if any file failed, 2 if none could be read). Of a huge file only the end is read
(:mod:`resurrect.rules.diagnose`), and stderr says so.

``resurrect rules check [PATH...]`` validates the shipped packs plus the given packs and
runs every rule's examples; exit 1 naming file and rule on any failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from resurrect.contracts import Diagnosis, Evidence
from resurrect.errors import JobFileRefused, RuleError
from resurrect.rules.attribution import diagnosis_of, weigh
from resurrect.rules.diagnose import scan_log_file
from resurrect.rules.engine import RuleEngine, load_engine
from resurrect.rules.explain import explanation_of
from resurrect.rules.pack_check import check_packs
from resurrect.text_safety import printable


def register(subparsers: Any) -> None:
    """Add ``diagnose`` and ``rules`` to the ``resurrect`` command."""
    diag = subparsers.add_parser("diagnose", help="attribute a failure from log files")
    diag.add_argument("files", nargs="+", metavar="FILE", help="log files; '-' reads stdin")
    diag.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    diag.add_argument(
        "--explain",
        action="store_true",
        help="also say which rule fired, why other causes lost and what would change it",
    )
    diag.add_argument(
        "--rules",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="extra rule pack (file or directory); repeatable",
    )
    diag.set_defaults(handler=run_diagnose)

    rules = subparsers.add_parser("rules", help="rule pack tools")
    rules_sub = rules.add_subparsers(dest="rules_command", metavar="SUBCOMMAND")
    check = rules_sub.add_parser("check", help="validate packs and run their examples")
    check.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="extra packs (files or directories) besides the shipped ones",
    )
    check.set_defaults(handler=run_rules_check)


def _scan_inputs(engine: RuleEngine, names: list[str]) -> tuple[list[Evidence], int]:
    evidence: list[Evidence] = []
    failed = 0
    for name in names:
        if name == "-":
            state = engine.new_state(file="<stdin>")
            while chunk := sys.stdin.buffer.read(1 << 20):
                evidence.extend(engine.scan_chunk(chunk, state))
            evidence.extend(engine.finish(state))
            continue
        path = Path(name)
        try:
            scanned = scan_log_file(path, engine=engine, skip_binary=True)
        except JobFileRefused as exc:
            print(f"resurrect: {exc}", file=sys.stderr)
            failed += 1
            continue
        except OSError as exc:
            reason = exc.strerror or str(exc)
            print(f"resurrect: {path}: cannot read: {reason}", file=sys.stderr)
            failed += 1
            continue
        if scanned.binary:
            print(f"resurrect: {path}: binary file, skipped", file=sys.stderr)
            failed += 1
            continue
        if scanned.note:
            print(f"resurrect: {scanned.note}", file=sys.stderr)
        evidence.extend(scanned.evidence)
    return evidence, failed


def _evidence_json(ev: Evidence) -> dict[str, Any]:
    out: dict[str, Any] = {
        "file": ev.file,
        "line": ev.line,
        "text": ev.text,
        "rule": ev.rule,
        "role": ev.role,
    }
    for key in ("fault_class", "host", "rank", "gpu"):
        value = getattr(ev, key)
        if value is not None:
            out[key] = str(value) if key == "fault_class" else value
    if ev.fields:
        out["fields"] = ev.fields
    return out


def diagnosis_json(diagnosis: Diagnosis) -> dict[str, Any]:
    """The JSON form ``resurrect diagnose --json`` prints."""
    return {
        "fault_class": diagnosis.fault_class.value,
        "action": diagnosis.action.value,
        "confidence": diagnosis.confidence,
        "culprit_hosts": diagnosis.culprit_hosts,
        "culprit_ranks": diagnosis.culprit_ranks,
        "culprit_gpus": diagnosis.culprit_gpus,
        "summary": diagnosis.summary,
        "evidence": [_evidence_json(e) for e in diagnosis.evidence],
        "cascade": [_evidence_json(e) for e in diagnosis.cascade],
    }


def run_diagnose(args: argparse.Namespace) -> int:
    engine = load_engine(args.rules)
    evidence, failed = _scan_inputs(engine, list(args.files))
    if failed == len(args.files):
        return 2
    attribution = weigh(evidence, confidences=engine.confidences())
    diagnosis = diagnosis_of(attribution)
    explanation = explanation_of(attribution, engine.packs()) if args.explain else None
    if args.json:
        out = diagnosis_json(diagnosis)
        if explanation is not None:
            out["explain"] = explanation.as_json()
        print(json.dumps(out, indent=2))
    else:
        print(printable(diagnosis.summary))  # the log lines are the job's: printed escaped
        print(f"action: {diagnosis.action.value}")
        for ev in diagnosis.evidence[:5]:
            print(printable(f"  {ev.file}:{ev.line}: [{ev.rule}] {ev.text[:160]}"))
        if diagnosis.cascade:
            print(f"  (+{len(diagnosis.cascade)} cascade lines)")
        if explanation is not None:
            print("\n".join(printable(line) for line in explanation.lines()))
    return 1 if failed else 0


def run_rules_check(args: argparse.Namespace) -> int:
    if not hasattr(args, "paths"):
        print("usage: resurrect rules check [PATH...]", file=sys.stderr)
        return 2
    try:
        failures = check_packs(list(args.paths))
    except RuleError as exc:
        print(f"resurrect: {exc}", file=sys.stderr)
        return 1
    for failure in failures:
        print(str(failure), file=sys.stderr)
    if failures:
        print(f"{len(failures)} example(s) failed", file=sys.stderr)
        return 1
    print("rule packs OK")
    return 0
