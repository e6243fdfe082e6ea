"""Attribution accuracy on a corpus of labelled real failure logs.

A corpus is a directory tree; every directory holding an ``expected.json`` is one case, and its
``*.log`` files are diagnosed together as one interruption. ``expected.json`` states the true
``fault_class`` (a :class:`~resurrect.contracts.FaultClass` value), the ``culprit_hosts`` and
``culprit_ranks`` the log shows (empty where it names none), the ``source`` it came from and,
where the log names a culprit, ``culprit_evidence``: the line(s) that name it::

    {"fault_class": "gpu.hardware", "culprit_hosts": ["cn-234"], "culprit_ranks": [],
     "culprit_evidence": ["zeyer@cn-234 ~ % nvidia-smi", "..."],
     "source": "https://github.com/...", "why": "...", "difficulty": "hard"}

Culprit accuracy is measured where the label names one: *culprit rank right* counts the cases
whose labelled ``culprit_ranks`` are not empty and whose diagnosis names exactly those ranks
(in any order); *culprit host right* likewise for hosts. ``culprits_exact`` counts every case
whose hosts and ranks are exactly as labelled (an empty label included).

``python -m resurrect.rules.corpus_report DIR... [--json] [--markdown FILE | --update FILE]``
prints the per-class accuracy (and per framework, where labels name a ``framework``), the
confusion matrix, the misses, the false drains and the ``unknown`` diagnoses of each corpus
(``--json``: one JSON line each); ``--update`` rewrites the generated block of a document
(docs/attribution.md) in place.

A *false drain* is a diagnosis whose class drains a node (``gpu.hardware``, ``network.fabric``,
``node.lost``) on a case whose true class is a workload or scheduler outcome: the job's own
fault (``app.error``, ``memory.*``, ``cuda.error``, ``process.crash``, ``storage.error``) or an
interruption nobody's hardware caused (``job.*``). Draining a healthy node for those costs the
cluster capacity and fixes nothing, so the count must stay at zero.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from resurrect.contracts import FaultClass
from resurrect.evidence_trust import NODE_CLASSES
from resurrect.rules.diagnose import diagnose_files
from resurrect.rules.engine import RuleEngine, default_engine

DRAIN_CLASSES = NODE_CLASSES
WORKLOAD_CLASSES = frozenset(
    {
        FaultClass.APP_ERROR,
        FaultClass.MEMORY_DEVICE_OOM,
        FaultClass.MEMORY_HOST_OOM,
        FaultClass.CUDA_ERROR,
        FaultClass.PROCESS_CRASH,
        FaultClass.STORAGE_ERROR,
        FaultClass.JOB_TIME_LIMIT,
        FaultClass.JOB_PREEMPTED,
        FaultClass.JOB_CANCELLED,
        FaultClass.JOB_HANG,
    }
)
"""True classes on which naming a drain class is a false drain."""


@dataclass(frozen=True)
class CaseResult:
    """One labelled case and what the diagnosis made of it."""

    name: str
    expected: FaultClass
    diagnosed: FaultClass
    culprits_expected: tuple[tuple[str, ...], tuple[int, ...]]
    culprits_diagnosed: tuple[tuple[str, ...], tuple[int, ...]]
    source: str
    summary: str
    framework: str = ""
    """The stack the log comes from, where its label names one (``jax``, ``horovod`` ...)."""

    @property
    def correct(self) -> bool:
        return self.expected is self.diagnosed

    @property
    def culprits_exact(self) -> bool:
        return self.culprits_expected == self.culprits_diagnosed

    @property
    def false_drain(self) -> bool:
        return self.diagnosed in DRAIN_CLASSES and self.expected in WORKLOAD_CLASSES

    @property
    def names_rank(self) -> bool:
        """The label names a culprit rank."""
        return bool(self.culprits_expected[1])

    @property
    def rank_right(self) -> bool:
        return set(self.culprits_expected[1]) == set(self.culprits_diagnosed[1])

    @property
    def names_host(self) -> bool:
        """The label names a culprit host."""
        return bool(self.culprits_expected[0])

    @property
    def host_right(self) -> bool:
        return set(self.culprits_expected[0]) == set(self.culprits_diagnosed[0])


@dataclass(frozen=True)
class CorpusReport:
    """Results over one corpus."""

    results: tuple[CaseResult, ...]

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def correct(self) -> int:
        return sum(r.correct for r in self.results)

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def false_drains(self) -> list[CaseResult]:
        return [r for r in self.results if r.false_drain]

    @property
    def culprits_exact(self) -> int:
        return sum(r.culprits_exact for r in self.results)

    @property
    def rank_cases(self) -> list[CaseResult]:
        """Cases whose label names a culprit rank."""
        return [r for r in self.results if r.names_rank]

    @property
    def ranks_right(self) -> int:
        return sum(r.rank_right for r in self.rank_cases)

    @property
    def host_cases(self) -> list[CaseResult]:
        """Cases whose label names a culprit host."""
        return [r for r in self.results if r.names_host]

    @property
    def hosts_right(self) -> int:
        return sum(r.host_right for r in self.host_cases)

    def per_class(self) -> dict[FaultClass, tuple[int, int]]:
        """True class to (correct, total)."""
        out: dict[FaultClass, tuple[int, int]] = {}
        for r in self.results:
            ok, n = out.get(r.expected, (0, 0))
            out[r.expected] = (ok + r.correct, n + 1)
        return dict(sorted(out.items(), key=lambda kv: kv[0].value))

    @property
    def unknowns(self) -> int:
        """Cases diagnosed ``unknown``."""
        return sum(r.diagnosed is FaultClass.UNKNOWN for r in self.results)

    def per_framework(self) -> dict[str, CorpusReport]:
        """The results of each framework the labels name, by framework name."""
        names = sorted({r.framework for r in self.results if r.framework})
        return {
            name: CorpusReport(tuple(r for r in self.results if r.framework == name))
            for name in names
        }

    def summary_json(self, name: str) -> dict[str, object]:
        return {
            "corpus": name,
            "cases": self.total,
            "correct": self.correct,
            "accuracy": round(self.accuracy, 4),
            "culprits_exact": self.culprits_exact,
            "culprit_rank_cases": len(self.rank_cases),
            "culprit_rank_right": self.ranks_right,
            "culprit_rank_accuracy": _ratio(self.ranks_right, len(self.rank_cases)),
            "culprit_host_cases": len(self.host_cases),
            "culprit_host_right": self.hosts_right,
            "culprit_host_accuracy": _ratio(self.hosts_right, len(self.host_cases)),
            "false_drains": len(self.false_drains),
            "unknown_diagnoses": self.unknowns,
        }


def _ratio(right: int, cases: int) -> float | None:
    """``right / cases`` rounded, None without cases."""
    return round(right / cases, 4) if cases else None


def find_cases(root: Path) -> list[Path]:
    """Every directory under ``root`` (itself included) that holds an ``expected.json``."""
    return sorted(p.parent for p in root.rglob("expected.json"))


def evaluate_case(case: Path, engine: RuleEngine | None = None) -> CaseResult:
    """Diagnose one case directory and compare it with its label."""
    expected = json.loads((case / "expected.json").read_text(encoding="utf-8"))
    diagnosis = diagnose_files(sorted(case.glob("*.log")), engine=engine)
    return CaseResult(
        name=case.name,
        expected=FaultClass(expected["fault_class"]),
        diagnosed=diagnosis.fault_class,
        culprits_expected=(
            tuple(expected.get("culprit_hosts", [])),
            tuple(expected.get("culprit_ranks", [])),
        ),
        culprits_diagnosed=(tuple(diagnosis.culprit_hosts), tuple(diagnosis.culprit_ranks)),
        source=str(expected.get("source", "")),
        summary=diagnosis.summary,
        framework=str(expected.get("framework", "")),
    )


def evaluate(cases: Iterable[Path], engine: RuleEngine | None = None) -> CorpusReport:
    """Diagnose every case with one engine (the shipped packs by default)."""
    engine = engine or default_engine()
    return CorpusReport(tuple(evaluate_case(case, engine) for case in cases))


def confusion_markdown(results: Sequence[CaseResult]) -> str:
    """A markdown confusion matrix: rows are true classes, columns diagnosed classes."""
    labels = sorted({c for r in results for c in (r.expected, r.diagnosed)}, key=str)
    counts = Counter((r.expected, r.diagnosed) for r in results)
    short = {label: f"c{i}" for i, label in enumerate(labels)}
    head = "| true \\ diagnosed | " + " | ".join(short[c] for c in labels) + " |"
    rule = "|---|" + "---:|" * len(labels)
    rows = [
        f"| {short[t]} `{t.value}` | "
        + " | ".join(
            (f"**{counts[(t, d)]}**" if t is d else str(counts[(t, d)])) if counts[(t, d)] else "."
            for d in labels
        )
        + " |"
        for t in labels
    ]
    legend = ", ".join(f"{short[c]} = `{c.value}`" for c in labels)
    return "\n".join([head, rule, *rows, "", f"Columns: {legend}."])


def per_class_markdown(report: CorpusReport) -> str:
    rows = ["| class | correct | cases | accuracy |", "|---|---:|---:|---:|"]
    for fault_class, (ok, n) in report.per_class().items():
        rows.append(f"| `{fault_class.value}` | {ok} | {n} | {ok / n:.0%} |")
    return "\n".join(rows)


def per_framework_markdown(report: CorpusReport) -> str:
    """Class, culprit rank and host accuracy by the framework the labels name."""
    rows = [
        "| framework | correct | cases | accuracy | culprit rank right | culprit host right |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, part in report.per_framework().items():
        rank = f"{part.ranks_right} / {len(part.rank_cases)}" if part.rank_cases else "-"
        host = f"{part.hosts_right} / {len(part.host_cases)}" if part.host_cases else "-"
        rows.append(
            f"| {name} | {part.correct} | {part.total} | {part.accuracy:.0%} | {rank} | {host} |"
        )
    return "\n".join(rows)


def misses_markdown(report: CorpusReport) -> str:
    misses = [r for r in report.results if not r.correct]
    if not misses:
        return "No misses."
    rows = ["| case | true | diagnosed | source |", "|---|---|---|---|"]
    for r in misses:
        rows.append(f"| {r.name} | `{r.expected.value}` | `{r.diagnosed.value}` | {r.source} |")
    return "\n".join(rows)


def culprits_markdown(report: CorpusReport) -> str:
    """Culprit rank and host accuracy where the label names one, and the cases missed."""

    def share(right: int, cases: int) -> str:
        return f"{right} of {cases} ({right / cases:.0%})" if cases else "no case names one"

    head = (
        f"Culprit rank right: **{share(report.ranks_right, len(report.rank_cases))}**; "
        f"culprit host right: **{share(report.hosts_right, len(report.host_cases))}**."
    )
    missed = [
        r
        for r in report.results
        if (r.names_rank and not r.rank_right) or (r.names_host and not r.host_right)
    ]
    if not missed:
        return head
    rows = ["| case | labelled (hosts; ranks) | diagnosed (hosts; ranks) |", "|---|---|---|"]
    for r in missed:
        rows.append(
            f"| {r.name} | {_culprit_text(r.culprits_expected)} "
            f"| {_culprit_text(r.culprits_diagnosed)} |"
        )
    return head + "\n\nCulprits missed:\n\n" + "\n".join(rows)


def _culprit_text(culprits: tuple[tuple[str, ...], tuple[int, ...]]) -> str:
    hosts, ranks = culprits
    return (", ".join(hosts) or "-") + "; " + (", ".join(str(r) for r in ranks) or "-")


def section_markdown(title: str, report: CorpusReport) -> str:
    """One corpus: headline numbers, per-class accuracy, confusion matrix, misses."""
    drains = report.false_drains
    drain_text = (
        "none"
        if not drains
        else ", ".join(f"{r.name} ({r.expected.value} named {r.diagnosed.value})" for r in drains)
    )
    by_framework = [per_framework_markdown(report)] if report.per_framework() else []
    return "\n\n".join(
        [
            f"### {title}",
            f"{report.correct} of {report.total} cases right: **{report.accuracy:.1%}**. "
            f"Culprit hosts and ranks exactly as labelled on {report.culprits_exact} of "
            f"{report.total}. False drains: **{len(drains)}** ({drain_text}). "
            f"Diagnosed `unknown`: {report.unknowns} of {report.total}.",
            culprits_markdown(report),
            *by_framework,
            per_class_markdown(report),
            confusion_markdown(report.results),
            "Misses:\n\n" + misses_markdown(report),
        ]
    )


BEGIN_MARK = "<!-- corpus-report:begin (generated by python -m resurrect.rules.corpus_report) -->"
END_MARK = "<!-- corpus-report:end -->"


def replace_block(document: str, block: str) -> str:
    """``document`` with the text between the report markers replaced by ``block``."""
    start, end = document.find(BEGIN_MARK), document.find(END_MARK)
    if start < 0 or end < start:
        raise ValueError(f"markers not found: {BEGIN_MARK!r} ... {END_MARK!r}")
    return document[: start + len(BEGIN_MARK)] + "\n\n" + block.strip() + "\n\n" + document[end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m resurrect.rules.corpus_report",
        description="Attribution accuracy on labelled log corpora.",
    )
    parser.add_argument(
        "corpora",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="corpora; one listed inside another is reported on its own, and with two or "
        "more a section reports all of them together",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line per corpus")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--markdown", type=Path, metavar="FILE", help="write the markdown here")
    out.add_argument(
        "--update",
        type=Path,
        metavar="FILE",
        help="replace the generated block (between the report markers) of this document",
    )
    args = parser.parse_args(argv)
    engine = default_engine()
    corpora: list[Path] = args.corpora
    reports: list[tuple[str, CorpusReport]] = []
    for corpus in corpora:
        nested = [
            c for c in corpora if c != corpus and c.resolve().is_relative_to(corpus.resolve())
        ]
        cases = [
            case
            for case in find_cases(corpus)
            if not any(case.resolve().is_relative_to(n.resolve()) for n in nested)
        ]
        if not cases:
            print(f"{corpus}: no cases (no expected.json)", file=sys.stderr)
            return 2
        label = f"`{corpus}`" + (
            " without " + ", ".join(f"`{n}`" for n in nested) if nested else ""
        )
        reports.append((label, evaluate(cases, engine)))
    if len(reports) > 1:
        together = CorpusReport(tuple(r for _, report in reports for r in report.results))
        reports.append(("all of them together", together))
    sections: list[str] = []
    for label, report in reports:
        if args.json:
            print(json.dumps(report.summary_json(label.replace("`", ""))))
        sections.append(section_markdown(f"{label} ({report.total} cases)", report))
    text = "\n\n".join(sections) + "\n"
    if args.update:
        args.update.write_text(
            replace_block(args.update.read_text(encoding="utf-8"), text), encoding="utf-8"
        )
    elif args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    elif not args.json:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
