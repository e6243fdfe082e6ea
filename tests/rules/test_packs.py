"""Every shipped pack loads, every shipped rule's examples hold, bad packs are named precisely."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from resurrect.contracts import FaultClass, SignalKind
from resurrect.errors import RuleError
from resurrect.rules import attribute, load_engine
from resurrect.rules.engine import RuleEngine
from resurrect.rules.loader import load_pack, shipped_pack_paths
from resurrect.rules.pack_check import check_packs, check_rule

ENGINE = load_engine()


def test_every_shipped_pack_loads() -> None:
    paths = shipped_pack_paths()
    assert {p.stem for p in paths} >= {
        "nccl",
        "cuda",
        "xid",
        "python",
        "slurm",
        "storage",
        "torchelastic",
        "memory",
        "gpu",
        "node",
        "context",
    }
    for path in paths:
        pack = load_pack(path)
        assert pack.rules, path


@pytest.mark.parametrize("rule_id", [c.rule.id for c in ENGINE.rules])
def test_rule_examples(rule_id: str) -> None:
    compiled = next(c for c in ENGINE.rules if c.rule.id == rule_id)
    failures = check_rule(ENGINE, compiled)
    assert not failures, "\n".join(str(f) for f in failures)


def _xid_line(code: int) -> str:
    return f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=1234, name=python, details"


@pytest.mark.parametrize("kind", [SignalKind.KERNEL_LOG, SignalKind.JOB_LOG, SignalKind.GPU_EVENT])
def test_one_xid_table_covers_every_code_exactly_once(kind: SignalKind) -> None:
    for code in range(1, 200):
        hits = [
            e
            for e in ENGINE.scan_line(_xid_line(code), kind=kind)
            if (e.rule or "").startswith("xid.")
        ]
        assert len(hits) == 1, (code, [e.rule for e in hits])
        assert hits[0].fields["xid"] == str(code)
        assert hits[0].gpu == "0000:3b:00"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (79, FaultClass.GPU_HARDWARE),
        (48, FaultClass.GPU_HARDWARE),
        (74, FaultClass.GPU_HARDWARE),
        (147, FaultClass.NETWORK_FABRIC),
        (119, FaultClass.GPU_HARDWARE),
        (13, FaultClass.CUDA_ERROR),
        (31, FaultClass.CUDA_ERROR),
        (43, FaultClass.CUDA_ERROR),
    ],
)
def test_xid_meaning(code: int, expected: FaultClass) -> None:
    (hit,) = [
        e
        for e in ENGINE.scan_line(_xid_line(code), kind=SignalKind.KERNEL_LOG)
        if (e.rule or "").startswith("xid.")
    ]
    assert hit.fault_class is expected
    assert hit.role == "root"


def test_xid_79_kernel_line_fields() -> None:
    line = (
        "[Mon Nov 29 10:00:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, "
        "GPU has fallen off the bus."
    )
    hits = ENGINE.scan_line(line, kind=SignalKind.KERNEL_LOG, host="gpu-17")
    xid = next(e for e in hits if e.rule == "xid.fallen_off_bus")
    assert (xid.fields["pci"], xid.fields["xid"], xid.host) == ("0000:3b:00", "79", "gpu-17")


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pack.yaml"
    path.write_text(body)
    return path


GOOD_RULE = """
  - id: my.rule
    literal: ["boom"]
    pattern: 'boom (?P<code>\\d+)'
    fault_class: app.error
    role: root
    fields: [code]
    examples:
      match: [{text: "boom 7", fields: {code: "7"}}]
      no_match: ["bang 7"]
"""


def test_user_pack_extends_engine(tmp_path: Path) -> None:
    path = _write(tmp_path, "pack: mine\nrules:" + GOOD_RULE)
    engine = load_engine([path])
    (hit,) = [e for e in engine.scan_line("x boom 42") if e.rule == "my.rule"]
    assert hit.fields == {"code": "42"}
    assert check_packs([path]) == []


@pytest.mark.parametrize(
    ("mutation", "needle"),
    [
        (("role: root", "role: root\n    colour: red"), "colour"),
        (("'boom (?P<code>\\d+)'", "'boom (?P<code>\\d+'"), "pattern"),
        (("fields: [code]", "fields: [nope]"), "nope"),
        (("fault_class: app.error", "fault_class: app.oops"), "fault_class"),
        (('literal: ["boom"]', "literal: []"), "literal"),
        (('literal: ["boom"]', 'literal: ["getötet"]'), "literal"),
    ],
)
def test_invalid_rule_is_named(tmp_path: Path, mutation: tuple[str, str], needle: str) -> None:
    path = _write(tmp_path, "pack: mine\nrules:" + GOOD_RULE.replace(*mutation))
    with pytest.raises(RuleError) as info:
        load_engine([path])
    message = str(info.value)
    assert str(path) in message and "my.rule" in message and needle in message


def test_a_caseless_non_ascii_literal_gates_its_rule_on_lines_and_chunks(tmp_path: Path) -> None:
    rule = GOOD_RULE.replace('literal: ["boom"]', 'literal: ["已杀死"]').replace(
        "'boom (?P<code>\\d+)'", "'已杀死 (?P<code>\\d+)'"
    )
    rule = rule.replace('"boom 7"', '"已杀死 7"')
    path = _write(tmp_path, "pack: mine\nrules:" + rule)
    engine = load_engine([path])
    assert check_packs([path]) == []
    (hit,) = [e for e in engine.scan_line("x 已杀死 42") if e.rule == "my.rule"]
    assert hit.fields == {"code": "42"}
    state = engine.new_state()
    found = engine.scan_chunk("a\nx 已杀死 42\n".encode(), state)
    assert [e.fields for e in found if e.rule == "my.rule"] == [{"code": "42"}]


def test_duplicate_rule_id_is_rejected(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "pack: mine\nrules:" + GOOD_RULE.replace("my.rule", "nccl.watchdog_timeout")
    )
    with pytest.raises(RuleError, match=re.escape(str(path)) + ".*nccl.watchdog_timeout"):
        load_engine([path])


def test_bad_yaml_names_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "pack: [unclosed\n")
    with pytest.raises(RuleError, match=re.escape(str(path))):
        load_engine([path])


def test_failing_example_is_reported(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "pack: mine\nrules:" + GOOD_RULE.replace('no_match: ["bang 7"]', 'no_match: ["boom 8"]'),
    )
    failures = check_packs([path])
    assert [(f.file, f.rule) for f in failures] == [(path, "my.rule")]
    assert "no_match" in failures[0].problem


def test_engine_without_shipped_packs(tmp_path: Path) -> None:
    path = _write(tmp_path, "pack: mine\nrules:" + GOOD_RULE)
    pack = load_pack(path)
    engine = RuleEngine([(path, r) for r in pack.rules])
    assert [e.rule for e in engine.scan_line("boom 1")] == ["my.rule"]
    assert engine.scan_line("NVRM: Xid (PCI:0000:3b:00): 79, pid=1") == []


def test_attribute_weighs_user_rules_by_their_own_confidence(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "pack: mine\nrules:"
        + GOOD_RULE.replace("fault_class: app.error", "fault_class: storage.error").replace(
            "role: root", "role: root\n    confidence: 0.99"
        ),
    )
    engine = load_engine([path])
    evidence = [
        *engine.scan_line("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."),
        *engine.scan_line("boom 3"),
    ]
    assert attribute(evidence).fault_class is FaultClass.STORAGE_ERROR
