"""``resurrect agent check``: verdicts, exit codes, JSON, and machines without GPUs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from resurrect.contracts import FaultClass, RecoveryAction
from resurrect.errors import ResurrectError
from resurrect.rules.engine import RuleEngine
from resurrect.sensors.node_agent import cli as agent_cli
from resurrect.sensors.node_agent import nvml_api as api
from resurrect.sensors.node_agent.fake_nvml import FakeNvml
from resurrect.sensors.node_agent.models import NodeVerdict
from resurrect.sensors.node_agent.verdict import run_check


def main(argv: list[str]) -> int:
    """``resurrect`` with only the agent's subcommands, handling errors as resurrect.cli does."""
    parser = argparse.ArgumentParser(prog="resurrect")
    agent_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except ResurrectError as exc:
        print(f"resurrect: error: {exc}", file=sys.stderr)
        return 2


def test_healthy_node(engine: RuleEngine, nvml: FakeNvml) -> None:
    verdict = run_check("n1", nvml=nvml, engine=engine)
    assert (verdict.status, verdict.exit_code, verdict.message) == ("healthy", 0, "healthy: 8 GPUs")
    assert [gpu.gpu for gpu in verdict.gpus] == [str(i) for i in range(8)]
    assert all(gpu.healthy and gpu.uuid for gpu in verdict.gpus)
    assert verdict.warnings == [] and verdict.readings == 40
    assert not nvml.initialised


def test_unhealthy_gpus_name_their_reasons(engine: RuleEngine, nvml: FakeNvml) -> None:
    nvml.gpus[1].row_remap_pending = True  # diagnostic, but not fit for new work
    nvml.gpus[6].lost = True
    nvml.gpus[3].clock_reasons = 0x40  # a warning only
    verdict = run_check("n1", nvml=nvml, engine=engine)
    assert (verdict.status, verdict.exit_code) == ("unhealthy", 1)
    assert verdict.message == "unhealthy: GPU 1, GPU 6"
    bad = {gpu.gpu: gpu for gpu in verdict.gpus if not gpu.healthy}
    assert set(bad) == {"1", "6"}
    assert bad["6"].fault_class is FaultClass.GPU_HARDWARE
    assert bad["6"].action is RecoveryAction.DRAIN_AND_RESTART
    assert bad["6"].reasons[0].startswith("gpu.nvml.lost (gpu.hardware, root)")
    assert bad["1"].reasons[0].startswith("gpu.row_remap.pending (gpu.hardware, diagnostic)")
    assert [w.split(":")[0] for w in verdict.warnings] == ["GPU 3"]


def test_unexplained_nvml_errors_are_warnings(engine: RuleEngine, nvml: FakeNvml) -> None:
    nvml.fail("nvmlDeviceGetRemappedRows", 2, code=api.NVML_ERROR_UNKNOWN)
    verdict = run_check("n1", nvml=nvml, engine=engine)
    assert verdict.status == "healthy"
    assert verdict.warnings == [
        "unexplained NVML error: nvml gpu=2 pci=0000:38:00 error call=row_remap "
        "code=NVML_ERROR_UNKNOWN"
    ]


@pytest.mark.parametrize(
    ("nvml", "message"),
    [
        (None, "no GPUs: NVML Python bindings (nvidia-ml-py) not installed"),
        (
            FakeNvml.with_gpus(2, library_missing=True),
            "no GPUs: NVML library not found (no NVIDIA driver on this machine)",
        ),
        (FakeNvml([]), "no GPUs: no GPUs"),
    ],
    ids=["no-bindings", "no-library", "zero-gpus"],
)
def test_no_gpus_is_exit_zero(engine: RuleEngine, nvml: FakeNvml | None, message: str) -> None:
    verdict = run_check("n1", nvml=nvml, engine=engine)
    assert (verdict.status, verdict.exit_code, verdict.message) == ("no_gpus", 0, message)


def test_cli_check_json_and_exit_codes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], nvml: FakeNvml
) -> None:
    monkeypatch.setattr(agent_cli, "load_pynvml", lambda: nvml)
    assert main(["agent", "check", "--json", "--node", "gpu7"]) == 0
    verdict = NodeVerdict.model_validate_json(capsys.readouterr().out)
    assert (verdict.node, verdict.status, len(verdict.gpus)) == ("gpu7", "healthy", 8)

    nvml.gpus[0].recovery_action = 2
    assert main(["agent", "check", "--node", "gpu7"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "gpu7: unhealthy: GPU 0"
    assert "GPU 0 (0000:18:00): UNHEALTHY gpu.hardware -> drain_and_restart" in out


def test_cli_check_on_this_machine_without_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    """The real pynvml here has no driver: a clear message and exit 0."""
    rc = main(["agent", "check", "--json"])
    verdict = json.loads(capsys.readouterr().out)
    if verdict["status"] == "no_gpus":
        assert rc == 0 and verdict["message"].startswith("no GPUs: ")
    else:  # pragma: no cover - on a GPU machine
        assert rc == (1 if verdict["status"] == "unhealthy" else 0)


def test_cli_readings_prints_every_reading(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeNvml.with_gpus(2)
    fake.gpus[1].ecc_volatile = 1
    monkeypatch.setattr(agent_cli, "load_pynvml", lambda: fake)
    assert main(["agent", "readings", "--node", "n1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# NVML: ok; driver 570.124.06; 2 GPUs"
    ecc = [line for line in out if "gpu=1" in line and " ecc " in line]
    assert ecc == [
        "gpu_metric nvml gpu=1 pci=0000:28:00 ecc uncorrectable_volatile=1 "
        "uncorrectable_aggregate=0  -> gpu.ecc.uncorrectable[gpu.hardware,root]"
    ]
    assert len([line for line in out if not line.startswith("#")]) == 10


def test_cli_readings_watch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeNvml.with_gpus(1)
    fake.gpus[0].row_remap_failure = True
    monkeypatch.setattr(agent_cli, "load_pynvml", lambda: fake)
    assert (
        main(["agent", "readings", "--json", "--watch", "0.5", "--node", "n1", "--no-kernel-log"])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    kinds = {record["type"] for record in records if "type" in record}
    assert kinds == {"heartbeat", "findings", "agent_stopped"}
    assert lines[-1].startswith("# ") and "polls" in lines[-1]


def test_bad_agent_settings_name_the_field(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RESURRECT_AGENT__INTERVAL_S", "-1")
    assert main(["agent", "check"]) == 2
    assert "agent.interval_s" in capsys.readouterr().err


def test_check_drain_drains_an_unhealthy_node_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, nvml: FakeNvml
) -> None:
    log = tmp_path / "scontrol.log"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {log}\n')
    scontrol.chmod(0o755)
    monkeypatch.setattr(agent_cli, "load_pynvml", lambda: nvml)
    argv = ["agent", "check", "--drain", "--scontrol", str(scontrol), "--node", "gpu9"]
    assert main(argv) == 0
    assert not log.exists()
    nvml.gpus[4].lost = True
    assert main(argv) == 1
    assert log.read_text().splitlines() == [
        "update",
        "NodeName=gpu9",
        "State=DRAIN",
        "Reason=resurrect: agent check: unhealthy: GPU 4",
    ]


def test_check_drain_failure_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], nvml: FakeNvml
) -> None:
    nvml.gpus[0].lost = True
    monkeypatch.setattr(agent_cli, "load_pynvml", lambda: nvml)
    assert main(["agent", "check", "--drain", "--scontrol", "/nonexistent/scontrol"]) == 1
    assert "could not drain" in capsys.readouterr().err
