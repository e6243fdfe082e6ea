"""The corpus report: accuracy, confusion matrix, false drains, the regenerated document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resurrect.contracts import FaultClass
from resurrect.rules.corpus_report import (
    BEGIN_MARK,
    END_MARK,
    evaluate,
    find_cases,
    main,
    replace_block,
)


def _case(root: Path, name: str, log: str, fault_class: str, hosts: list[str]) -> None:
    case = root / name
    case.mkdir(parents=True)
    (case / "combined.log").write_text(log + "\n")
    (case / "expected.json").write_text(
        json.dumps(
            {
                "fault_class": fault_class,
                "culprit_hosts": hosts,
                "culprit_ranks": [],
                "source": f"https://github.com/example/{name}",
                "why": "test",
                "difficulty": "easy",
            }
        )
    )


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    _case(root, "ok", "OSError: [Errno 28] No space left on device", "storage.error", [])
    _case(
        root,
        "drain",  # labelled a workload fault, but the log says the node's GPU fell off the bus
        "Nov 29 19:00:00 n4 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off",
        "app.error",
        [],
    )
    _case(root / "more", "hang", "KeyboardInterrupt", "job.hang", [])
    return root


def test_counts_misses_and_false_drains(corpus: Path) -> None:
    cases = find_cases(corpus)
    assert [c.name for c in cases] == ["drain", "hang", "ok"]
    report = evaluate(cases)
    assert (report.correct, report.total) == (1, 3)
    assert [r.name for r in report.false_drains] == ["drain"]
    assert report.per_class()[FaultClass.STORAGE_ERROR] == (1, 1)
    assert report.summary_json("c")["false_drains"] == 1


def test_cli_json_reports_nested_corpora_apart_and_together(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(corpus), str(corpus / "more"), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(x["cases"], x["correct"]) for x in lines] == [(2, 1), (1, 0), (3, 1)]
    assert lines[-1]["corpus"] == "all of them together"


def test_update_rewrites_only_the_generated_block(corpus: Path, tmp_path: Path) -> None:
    doc = tmp_path / "attribution.md"
    doc.write_text(f"# Title\n\nprose\n\n{BEGIN_MARK}\nold\n{END_MARK}\n\nafter\n")
    assert main([str(corpus), "--update", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# Title\n\nprose\n") and text.endswith(f"{END_MARK}\n\nafter\n")
    assert "old" not in text and "1 of 3 cases right" in text
    assert "| true \\ diagnosed |" in text and "False drains: **1**" in text


def test_update_needs_the_markers() -> None:
    with pytest.raises(ValueError, match="markers"):
        replace_block("no markers here", "x")


def test_empty_corpus_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no cases" in capsys.readouterr().err


def test_results_are_split_by_the_framework_labels_name_and_unknowns_counted(
    tmp_path: Path,
) -> None:
    _case(
        tmp_path, "a", "ResourceExhaustedError: OOM when allocating tensor", "memory.device_oom", []
    )
    _case(tmp_path, "b", "step 1 loss 2.0", "app.error", [])
    _case(tmp_path, "c", "KeyError: 'x'", "app.error", [])
    for name, framework in (("a", "tensorflow"), ("b", "jax"), ("c", "jax")):
        path = tmp_path / name / "expected.json"
        label = json.loads(path.read_text())
        path.write_text(json.dumps({**label, "framework": framework}))
    report = evaluate(find_cases(tmp_path))
    parts = report.per_framework()
    assert sorted(parts) == ["jax", "tensorflow"]
    assert (parts["jax"].correct, parts["jax"].total) == (1, 2)
    assert (parts["tensorflow"].correct, parts["tensorflow"].total) == (1, 1)
    assert report.unknowns == 1
    assert report.summary_json("t")["unknown_diagnoses"] == 1
