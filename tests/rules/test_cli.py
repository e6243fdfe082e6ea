"""``resurrect diagnose`` and ``resurrect rules check`` through resurrect.cli.main."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

import resurrect.cli
from resurrect.cli import main

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "real-logs"


@pytest.fixture(autouse=True)
def _only_rules_subcommands(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exercise main() with just this package's subcommands, independent of other areas."""
    monkeypatch.setattr(resurrect.cli, "SUBCOMMAND_MODULES", ("resurrect.rules.cli",))


def test_diagnose_json(capsys: pytest.CaptureFixture[str]) -> None:
    log = CORPUS / "case-032" / "combined.log"
    assert main(["diagnose", "--json", str(log)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fault_class"] == "gpu.hardware"
    assert out["action"] == "drain_and_restart"
    assert out["culprit_hosts"] == ["cn-234"]
    assert out["culprit_ranks"] == []
    assert 0 < out["confidence"] <= 1
    first = out["evidence"][0]
    assert {"file", "line", "text", "rule", "role"} <= set(first)
    assert first["file"] == str(log) and first["line"] == 2 and first["role"] == "root"
    assert isinstance(out["cascade"], list) and out["summary"].startswith("gpu.hardware")


def test_diagnose_plain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(CORPUS / "case-009" / "combined.log")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("collective.timeout") and "action: restart" in out


def test_diagnose_bad_files_reported_others_processed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "core.bin"
    binary.write_bytes(b"\x7fELF\x00\x00\x01" * 100)
    missing = tmp_path / "missing.log"
    good = CORPUS / "case-031" / "combined.log"
    rc = main(["diagnose", "--json", str(missing), str(binary), str(good)])
    captured = capsys.readouterr()
    assert rc == 1
    assert json.loads(captured.out)["fault_class"] == "memory.device_oom"
    assert "missing.log: cannot read" in captured.err and "core.bin: binary file" in captured.err


def test_diagnose_nothing_readable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(tmp_path / "nope.log")]) == 2
    assert "nope.log" in capsys.readouterr().err


def test_diagnose_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = b"OSError: [Errno 28] No space left on device\r\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["diagnose", "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fault_class"] == "storage.error" and out["evidence"][0]["file"] == "<stdin>"


def test_diagnose_with_user_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pack = tmp_path / "site.yaml"
    pack.write_text(
        "pack: site\nrules:\n  - id: site.fs_hiccup\n    literal: [fsq-fault]\n    pattern: "
        "'FSQ-FAULT'\n"
        "    fault_class: storage.error\n    role: root\n    confidence: 0.9\n"
        "    examples: {match: ['FSQ-FAULT 3']}\n"
    )
    log = tmp_path / "job.log"
    log.write_text("step 1\nFSQ-FAULT on /lustre\n")
    assert main(["diagnose", "--json", "--rules", str(pack), str(log)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fault_class"] == "storage.error" and out["evidence"][0]["rule"] == "site.fs_hiccup"


def test_rules_check_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "check"]) == 0
    assert "OK" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "named"),
    [
        pytest.param(
            "pack: broken\nrules:\n  - id: broken.one\n    literal: [boom]\n    pattern: 'boom'\n"
            "    examples: {match: ['bang']}\n",
            ["broken.one"],
            id="a-rule-missing-its-own-example",
        ),
        pytest.param(
            "pack: x\nrules:\n  - id: x.y\n    literal: [a]\n    pattern: 'a'\n    bogus: 1\n"
            "    examples: {match: [a]}\n",
            ["x.y", "bogus"],
            id="an-unknown-field",
        ),
    ],
)
def test_rules_check_failure_names_file_and_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, named: list[str]
) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_text(text)
    assert main(["rules", "check", str(pack)]) == 1
    err = capsys.readouterr().err
    assert str(pack) in err and all(name in err for name in named), err


def test_diagnose_explain_plain(capsys: pytest.CaptureFixture[str]) -> None:
    log = CORPUS / "dev" / "dev-051" / "combined.log"
    assert main(["diagnose", "--explain", str(log)]) == 0
    out = capsys.readouterr().out
    assert "decision: memory.device_oom" in out
    assert f"fired: rule memory.cuda_oom (pack memory) at {log}:1" in out
    assert "lost: collective.timeout (cascade)" in out and "nccl.watchdog_timeout" in out


def test_diagnose_explain_json(capsys: pytest.CaptureFixture[str]) -> None:
    log = CORPUS / "dev" / "dev-008" / "combined.log"
    assert main(["diagnose", "--json", "--explain", str(log)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fault_class"] == "job.hang"
    explain = out["explain"]
    assert explain["fault_class"] == "job.hang" and explain["decided_by"] == "cascade"
    assert explain["fired"]["rule"] == "python.keyboard_interrupt"
    assert explain["fired"]["pack"] == "python" and explain["fired"]["line"] == 5
    assert explain["refinements"][0].startswith("job.cancelled -> job.hang")
    assert explain["would_change"]


def test_diagnose_without_explain_has_no_explanation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--json", str(CORPUS / "case-031" / "combined.log")]) == 0
    assert "explain" not in json.loads(capsys.readouterr().out)
