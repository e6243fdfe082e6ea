"""Accuracy on the labelled real logs (copied from the shared corpus into tests/fixtures)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from resurrect.rules import diagnose_files

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "real-logs"
MIN_ACCURACY = 0.9


def _confusion(pairs: list[tuple[str, str]]) -> str:
    labels = sorted({label for pair in pairs for label in pair})
    counts = Counter(pairs)
    width = max(len(label) for label in labels)
    head = " " * (width + 2) + " ".join(f"{i:>3}" for i in range(len(labels)))
    rows = [
        f"{label:<{width}}  " + " ".join(f"{counts[(label, pred)] or '.':>3}" for pred in labels)
        for label in labels
    ]
    legend = "  ".join(f"{i}={label}" for i, label in enumerate(labels))
    return "\n".join(["rows: expected, columns: diagnosed", head, *rows, legend])


def test_real_log_accuracy() -> None:
    cases = sorted(p for p in CORPUS.iterdir() if (p / "expected.json").exists())
    assert len(cases) >= 19
    pairs: list[tuple[str, str]] = []
    wrong: list[str] = []
    culprit_hits = 0
    for case in cases:
        expected = json.loads((case / "expected.json").read_text())
        diagnosis = diagnose_files(sorted(case.glob("*.log")))
        pairs.append((expected["fault_class"], diagnosis.fault_class.value))
        if diagnosis.fault_class.value != expected["fault_class"]:
            wrong.append(
                f"{case.name}: expected {expected['fault_class']}, got "
                f"{diagnosis.fault_class.value} ({diagnosis.summary})"
            )
        if (
            diagnosis.culprit_hosts == expected["culprit_hosts"]
            and diagnosis.culprit_ranks == expected["culprit_ranks"]
        ):
            culprit_hits += 1
    accuracy = sum(e == d for e, d in pairs) / len(pairs)
    report = (
        f"class accuracy {accuracy:.1%} on {len(pairs)} real logs; culprits exact on "
        f"{culprit_hits}/{len(pairs)}\n{_confusion(pairs)}\n" + "\n".join(wrong)
    )
    print("\n" + report)
    assert accuracy >= MIN_ACCURACY, report
