"""NCCL's RAS client: its JSON status read into findings; a clear "not available" otherwise."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from resurrect.stacks.nccl_ras import parse_ras_json, query_ras

SAMPLE = Path(__file__).parent.parent / "fixtures" / "nccl_ras" / "status-missing-rank.json"


def test_missing_and_lagging_ranks_are_found() -> None:
    report = parse_ras_json(SAMPLE.read_text())
    assert report.available and report.nccl_version == "2.27.7" and report.communicators == 2
    assert [(f.rank, f.host, f.pid, f.why) for f in report.findings] == [
        (11, "10.0.3.8", 41211, "missing (unresponsive)"),
        (12, "10.0.3.8", 41212, "behind: AllReduce 812 of 813"),
    ]
    evidence = report.evidence("node8")
    assert [e.rank for e in evidence] == [11, 12]
    assert all(e.rule == "nccl_ras.rank" and e.source == "job_output" for e in evidence)
    assert "rank 11 of communicator 0x9c2f6e61a4d03b17" in evidence[0].text


def test_a_healthy_job_says_so() -> None:
    text = SAMPLE.read_text()
    healthy = parse_ras_json(text.replace('"AllReduce": 812', '"AllReduce": 813'))
    assert [f.rank for f in healthy.findings] == [11]  # the missing rank stays missing
    clean = parse_ras_json('{"nccl_version": "2.27.7", "communicators": []}')
    assert clean.available and clean.findings == []
    [note] = clean.evidence("n1")
    assert note.rule == "nccl_ras.healthy"


def test_errors_and_aborts_are_findings() -> None:
    text = SAMPLE.read_text().replace(
        '"async_error": 0,\n            "finalize_called"',
        '"async_error": 6,\n            "finalize_called"',
        1,
    )
    first = parse_ras_json(text).findings[1]
    assert first.why == "nccl error 6"


def test_garbage_is_not_a_report() -> None:
    for text in ("", "not json", "[1, 2]", '{"communicators": 3}', "[" * 100_000):
        report = parse_ras_json(text)
        assert not report.available and report.reason


def fake_ncclras(tmp_path: Path, body: str) -> str:
    script = tmp_path / "ncclras"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.fixture
def listening() -> Iterator[int]:
    """A port this process (standing for a rank whose NCCL RAS thread listens) holds."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


MINE = [os.getpid()]


def test_the_client_is_asked_for_json_with_a_bound(tmp_path: Path, listening: int) -> None:
    args = tmp_path / "args"
    binary = fake_ncclras(tmp_path, f'echo "$@" > {args}\ncat {SAMPLE}\n')
    report = query_ras(pids=MINE, port=listening, timeout_s=6, binary=binary)
    assert report.available and len(report.findings) == 2
    assert args.read_text().split() == ["-f", "json", "-p", str(listening), "-t", "4"]


def test_not_available_is_said_plainly(tmp_path: Path, listening: int) -> None:
    asked = tmp_path / "asked"
    nobody = fake_ncclras(tmp_path, f"touch {asked}\nexit 1\n")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    report = query_ras(pids=MINE, port=free, binary=nobody)
    assert not report.available and "no NCCL process with RAS listens" in report.reason
    assert not asked.exists()  # nothing to ask: the client was not run
    [note] = report.evidence("node2")
    assert note.rule == "nccl_ras.unavailable" and "NCCL RAS not available on node2" in note.text
    old = fake_ncclras(tmp_path, 'echo "Invalid format: json" >&2\nexit 1\n')
    assert "no JSON output" in query_ras(pids=MINE, port=listening, binary=old).reason
    slow = fake_ncclras(tmp_path, "sleep 5\n")
    report = query_ras(pids=MINE, port=listening, binary=slow, timeout_s=1)
    assert "did not answer within 1 s" in report.reason


def listener(port: int) -> subprocess.Popen[bytes]:
    """Another process (not a rank of the probed job) that binds ``port`` first."""
    code = (
        "import socket, sys, time\n"
        f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    return child


def test_a_port_another_process_holds_is_not_asked(tmp_path: Path) -> None:
    """Audit item (issue 20): the RAS port is one any local user may bind first; ncclras
    (run as root) then talks to them. Confirmed; now the listener must be a rank's socket."""
    asked = tmp_path / "asked"
    binary = fake_ncclras(tmp_path, f"touch {asked}\ncat {SAMPLE}\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    squatter = listener(port)
    try:
        report = query_ras(pids=MINE, port=port, binary=binary)
        assert not report.available and not asked.exists()
        assert f"port {port} here is held by a process that is not a rank" in report.reason
        assert f"uid {os.getuid()}" in report.reason
        # the same process as one of the job's ranks: asked
        assert query_ras(pids=[*MINE, squatter.pid], port=port, binary=binary).available
        assert asked.exists()
    finally:
        squatter.kill()
        squatter.wait()


def test_a_node_without_ncclras(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    report = query_ras(pids=MINE)
    assert not report.available and "ncclras is not installed" in report.reason
