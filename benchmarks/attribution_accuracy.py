"""Attribution accuracy on the labelled real-log corpus, against a baseline from the same run.

Diagnoses every case under ``tests/fixtures/real-logs`` (the shared corpus, the development
corpus ``dev/`` and the validation sets ``validation/``, ``validation-2/`` .. ``validation-8/``)
with the shipped packs and (``--json``) prints one JSON line::

    {"cases": ..., "accuracy": ..., "culprit_rank_accuracy": ..., "culprit_host_accuracy": ...,
     "false_drains": ..., "baseline_accuracy": ..., "ratio_vs_baseline": ...,
     "diagnose_ms_per_case": ..., "corpora": {...}}

Culprit accuracy counts the cases whose label names a culprit rank (host) and whose diagnosis
names exactly those (:mod:`resurrect.rules.corpus_report`); every corpus reports its own.

``baseline_accuracy`` is what always naming the corpus's most common class scores on the same
cases (the floor any attribution must clear); ``ratio_vs_baseline`` is accuracy over it.
``--markdown FILE`` also regenerates the generated block of that document (docs/attribution.md)
through :mod:`resurrect.rules.corpus_report`.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path

from _common import benchmark_parser, print_result

from resurrect.rules.corpus_report import CorpusReport, evaluate, find_cases
from resurrect.rules.corpus_report import main as report_main
from resurrect.rules.engine import load_engine

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "real-logs"
PARTS = (
    "dev",
    "validation",
    "validation-2",
    "validation-3",
    "validation-4",
    "validation-5",
    "validation-6",
    "validation-7",
    "validation-8",
    "validation-jax",
    "validation-tf",
    "validation-horovod",
    "validation-other",
    "validation-frameworks-2",
    "validation-frameworks-3",
    "validation-frameworks-4",
    "validation-frameworks-5",
    "validation-frameworks-6",
    "validation-frameworks-7",
    "validation-frameworks-8",
    "validation-frameworks-9",
    "validation-frameworks-10",
    "validation-frameworks-11",
    "validation-frameworks-12",
    "validation-frameworks-13",
    "validation-frameworks-14",
    "validation-frameworks-15",
    "validation-frameworks-16",
    "validation-frameworks-17",
    "validation-frameworks-18",
    "validation-frameworks-19",
    "validation-frameworks-20",
    "validation-frameworks-21",
    "validation-frameworks-22",
    "validation-frameworks-23",
    "validation-frameworks-24",
    "validation-frameworks-25",
    "validation-frameworks-26",
    "validation-frameworks-27",
    "validation-frameworks-28",
    "validation-frameworks-29",
    "validation-frameworks-30",
    "validation-frameworks-31",
    "validation-frameworks-32",
    "validation-frameworks-33",
    "validation-frameworks-34",
    "validation-frameworks-35",
    "validation-frameworks-36",
    "validation-frameworks-37",
)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="update this document")
    args = parser.parse_args(argv)

    engine = load_engine()
    cases = find_cases(args.corpus)
    start = time.perf_counter()
    report = evaluate(cases, engine)
    elapsed = time.perf_counter() - start

    labels = Counter(r.expected for r in report.results)
    baseline = labels.most_common(1)[0][1] / report.total if report.total else 0.0
    corpora: dict[str, object] = {}
    for part in (*PARTS, "shared"):
        results = tuple(
            r
            for r, case in zip(report.results, cases, strict=True)
            if (case.parent.name == part) or (part == "shared" and case.parent == args.corpus)
        )
        if results:
            corpora[part] = CorpusReport(results).summary_json(part)
    result = {
        "cases": report.total,
        "correct": report.correct,
        "accuracy": round(report.accuracy, 4),
        "false_drains": len(report.false_drains),
        "culprits_exact": report.culprits_exact,
        "culprit_rank_cases": len(report.rank_cases),
        "culprit_rank_accuracy": _share(report.ranks_right, len(report.rank_cases)),
        "culprit_host_cases": len(report.host_cases),
        "culprit_host_accuracy": _share(report.hosts_right, len(report.host_cases)),
        "baseline_accuracy": round(baseline, 4),
        "ratio_vs_baseline": round(report.accuracy / baseline, 2) if baseline else None,
        "diagnose_ms_per_case": round(1000 * elapsed / max(1, report.total), 2),
        "corpora": corpora,
    }
    if args.markdown:
        dirs = [args.corpus, *(args.corpus / p for p in PARTS if (args.corpus / p).is_dir())]
        report_main([*(os.path.relpath(d) for d in dirs), "--update", str(args.markdown)])
    summary = (
        f"{report.correct}/{report.total} right ({report.accuracy:.1%}), culprit rank "
        f"{report.ranks_right}/{len(report.rank_cases)}, culprit host "
        f"{report.hosts_right}/{len(report.host_cases)}, baseline {baseline:.1%}, "
        f"false drains {len(report.false_drains)}"
    )
    print_result(result, as_json=args.json, summary=summary)
    return 0


def _share(right: int, cases: int) -> float | None:
    return round(right / cases, 4) if cases else None


if __name__ == "__main__":
    sys.exit(main())
