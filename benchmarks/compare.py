"""Compare a benchmark run with the performance record committed in the repository, naming
every figure more than 20 % worse (and every one more than 20 % better).

The record: ``benchmarks/record/*.jsonl``, one JSON line per benchmark as
``benchmarks/run_all.sh`` writes them; the last one committed (names sort by date) unless
``--record`` names another. A run's line is compared with the record's line of the same
benchmark, of the same size when the record has one (``jobs``), else its last.

Which way is better is known per figure (:func:`direction`): rates, speed-ups and ratios
against a baseline are better higher; times, CPU, events, calls and rows per recovery,
figures not read, cancellations and violations are better lower; a check that held
(``true``) must still hold. Inputs (sizes, targets), the baselines' own figures and the
variants' copies are not judged. A lower-is-better figure is compared above a floor (1 for
counts and for calls per recovery, 0.1 otherwise), so 0 -> 0.6 calls per recovery (a read made
once per interval of time, in a run that lasted longer) is no regression, 0 -> 5 is.

    python benchmarks/compare.py RUN.jsonl [--record FILE] [--worse 0.2] [--fail-over 3]
        [--fail-on REGEX]

Exit status: 1 when ``--fail-over F`` is given and a figure (of those whose dotted path
matches ``--fail-on``) is more than F times worse (what CI fails on), else 0.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD_DIR = ROOT / "benchmarks" / "record"

# Paths (dotted) holding these components are not figures of the code measured.
NOT_JUDGED = frozenset(
    {"targets", "variants", "recorded", "sqlite_pragmas", "events_by_type", "benchmark", "machine"}
)
# Figures that are inputs or context, not results.
INPUTS = frozenset(
    {"jobs", "reports_each", "recoveries", "cpus", "steps", "seconds", "size_gb", "lines"}
)
NOT_JUDGED_PREFIXES = ("baseline_", "empty_")
# Groups whose every figure is better lower (their keys may hold dots: activity types).
LOWER_GROUPS = ("calls_per_recovery", "cancelled_activities")
# Groups of calls (and rows) per recovery: compared above one per recovery (see floor_of).
CALL_GROUPS = ("calls_per_recovery",)
HIGHER = re.compile(
    r"(per_s|_per_sec|speedup\w*|vs_empty|vs_baseline|ratio_vs\w*|accuracy\w*|gb_s|"
    r"goodput\w*|_x|throughput\w*)$"
)
LOWER = re.compile(
    r"(per_recovery|per_recovery\.\w[\w .]*|_ms|_s|seconds|cpu\w*|rss\w*|bytes\w*|"
    r"violations\w*|twice|not_read|cancelled\w*|events\w*|overhead\w*|slowdown)$"
)


@dataclass(frozen=True)
class Change:
    benchmark: str
    figure: str
    run: float
    recorded: float
    factor: float  # how many times worse (> 1) or better (< 1)

    def line(self) -> str:
        how = "worse" if self.factor > 1 else "better"
        times = self.factor if self.factor > 1 else 1 / self.factor
        return (
            f"{self.benchmark} {self.figure}: {self.run:g} (recorded {self.recorded:g}),"
            f" {times:.2f}x {how}"
        )


def direction(path: str, value: object = None) -> str | None:
    """``higher`` or ``lower`` (which is better) for the figure at ``path``; ``held`` for
    a check (a boolean); None when it is not judged."""
    parts = path.split(".")
    if any(p in NOT_JUDGED for p in parts) or parts[-1] in INPUTS:
        return None
    if parts[0].startswith(NOT_JUDGED_PREFIXES):
        return None
    if isinstance(value, bool):
        return "held"
    if parts[0].endswith(LOWER_GROUPS):
        return "lower"  # every call and row a recovery asks for, every cancellation
    if HIGHER.search(parts[-1]):
        return "higher"
    if LOWER.search(parts[-1]):
        return "lower"
    return None


def figures(line: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of ``line`` (numbers and booleans) by dotted path."""
    for key, value in line.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from figures(value, f"{path}.")
        elif isinstance(value, bool | int | float):
            yield path, value


def floor_of(path: str, run: float, recorded: float) -> float:
    """The smallest value a lower-is-better figure is compared above: one for counts, and one
    call (or row) per recovery in the calls groups, where fewer than one per recovery is the
    share of recoveries that made the call, moved by the run's length (a read made once per
    interval of time, the drain census) or by batching (the budget's updates), not by what a
    recovery costs; 0.1 otherwise."""
    if path.split(".")[0].endswith(CALL_GROUPS):
        return 1.0
    return 1.0 if float(run).is_integer() and float(recorded).is_integer() else 0.1


def worse_factor(how: str, run: float, recorded: float, floor: float) -> float:
    """How many times worse ``run`` is than ``recorded`` (< 1: better); a lower-is-better
    figure is compared above ``floor``."""
    if how == "higher":
        if run <= 0:
            return float("inf") if recorded > 0 else 1.0
        return recorded / run
    return max(run, floor) / max(recorded, floor)


def compare(run: Mapping[str, Any], recorded: Mapping[str, Any]) -> list[Change]:
    name = str(run.get("benchmark", "?"))
    if "jobs" in run:
        name = f"{name}[jobs={run['jobs']}]"
    old = dict(figures(recorded))
    groups = {path.split(".")[0] for path in old} | {k for k in recorded if k in LOWER_GROUPS}
    changes = []
    for path, value in figures(run):
        how = direction(path, value)
        if how is None:
            continue
        if path not in old:
            # a call or a cancellation the record's run did not have at all: from zero
            if how != "lower" or "." not in path or path.split(".")[0] not in groups:
                continue
            old[path] = 0
        before = old[path]
        if how == "held" or isinstance(before, bool):
            if before is True and value is not True:
                changes.append(Change(name, path, float(value), 1.0, float("inf")))
            continue
        factor = worse_factor(
            how, float(value), float(before), floor_of(path, float(value), float(before))
        )
        changes.append(Change(name, path, float(value), float(before), factor))
    return changes


def read_lines(path: Path) -> list[dict[str, Any]]:
    lines = []
    for text in path.read_text().splitlines():
        text = text.strip()
        if text.startswith("{"):
            lines.append(json.loads(text))
    return lines


def last_committed_record() -> Path | None:
    """The newest record file git knows (committed or staged), else the newest on disk."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "--", "benchmarks/record/*.jsonl"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = []
    found = sorted(ROOT / p for p in listed) or sorted(RECORD_DIR.glob("*.jsonl"))
    return found[-1] if found else None


def match(line: Mapping[str, Any], record: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The record's line of ``line``'s benchmark: of the same size when there is one."""
    same = [r for r in record if r.get("benchmark") == line.get("benchmark")]
    sized = [r for r in same if "jobs" in line and r.get("jobs") == line.get("jobs")]
    chosen = sized or same
    return chosen[-1] if chosen else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("run", type=Path, help="the run's JSON lines")
    parser.add_argument("--record", type=Path, help="default: the last committed record")
    parser.add_argument("--worse", type=float, default=0.2, help="name figures worse by this")
    parser.add_argument("--fail-over", type=float, help="exit 1 if a figure is this many x worse")
    parser.add_argument(
        "--fail-on",
        default="",
        help="only figures whose path matches this regular expression can fail (default all)",
    )
    args = parser.parse_args(argv)
    record_path = args.record or last_committed_record()
    if record_path is None:
        print("no performance record to compare with (benchmarks/record/*.jsonl)")
        return 0
    record = read_lines(record_path)
    shown = record_path.relative_to(ROOT) if record_path.is_relative_to(ROOT) else record_path
    print(f"compared with {shown}")
    failed = False
    can_fail = re.compile(args.fail_on)
    for line in read_lines(args.run):
        recorded = match(line, record)
        if recorded is None:
            print(f"{line.get('benchmark')}: not in the record")
            continue
        changes = compare(line, recorded)
        worse = [c for c in changes if c.factor > 1 + args.worse]
        better = [c for c in changes if c.factor < 1 / (1 + args.worse)]
        for change in worse:
            over = (
                args.fail_over is not None
                and change.factor > args.fail_over
                and bool(can_fail.search(change.figure))
            )
            failed = failed or over
            print(("REGRESSION " if over else "worse ") + change.line())
        for change in better:
            print("better " + change.line())
        print(
            f"{line.get('benchmark')}: {len(changes)} figures judged, {len(worse)} more than"
            f" {args.worse:.0%} worse, {len(better)} better"
        )
    if failed:
        print(f"a figure is more than {args.fail_over:g}x worse than the record", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
