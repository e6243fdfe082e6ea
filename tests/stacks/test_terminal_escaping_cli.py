"""Attack 9 (issue 20) through the real commands: ``resurrect stacks dump``,
``stacks flight-recorder`` and ``diagnose`` print a hostile job's node names, frames,
process-group ids and log lines with their escape sequences shown, not sent to the
terminal; a good rank in the same output reads as before, and ``--json`` stays JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import resurrect.stacks.cli as stacks_cli
from resurrect.cli import main
from resurrect.stacks.classify import RankStack
from resurrect.stacks.pyspy_text import parse_pyspy_dump

STACKS = Path(__file__).parent.parent / "fixtures" / "stacks"
TITLE = "\x1b]0;pwned\x07"
ERASE = "\x1b[1A\x1b[2K"
FORGED = f"{ERASE}all ranks healthy"


def no_escape_reaches(out: str) -> None:
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out


def test_stacks_dump_prints_a_hostile_node_and_frame_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = (STACKS / "gloo-ddp-victim-rank0-native.txt").read_text()
    hostile = (
        "Process 9001: python train.py\nPython v3.11.2 (/usr/bin/python3.11)\n\n"
        'Thread 9001 (idle): "MainThread"\n'
        f"    {FORGED} (train.py:12)\n"
    )
    ranks = [
        RankStack(0, "node1", 9000, "S", parse_pyspy_dump(victim), victim, world_size=2),
        RankStack(1, f"node2{TITLE}", 9001, "S", parse_pyspy_dump(hostile), hostile,
                  world_size=2),
    ]  # fmt: skip
    monkeypatch.setattr(stacks_cli, "collect_job_stacks", lambda *a, **k: ranks)
    monkeypatch.setattr(stacks_cli, "query_ras", lambda **k: None)
    assert main(["stacks", "dump", "--job", "77"]) == 0
    out = capsys.readouterr().out
    no_escape_reaches(out)
    assert "rank 1 on node2\\x1b]0;pwned\\x07 pid 9001" in out
    assert "\\x1b[1A\\x1b[2Kall ranks healthy" in out
    assert "rank 0 on node1 pid 9000: collective" in out  # the good rank reads as before
    assert main(["stacks", "dump", "--job", "77", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ranks"][1]["node"] == f"node2{TITLE}"  # JSON keeps the text, escaped


def test_flight_recorder_prints_hostile_process_groups_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for rank, seq in ((0, 9), (1, 8)):
        entry = {"pg_id": f"0{TITLE}", "collective_seq_id": seq, "profiling_name": FORGED,
                 "state": "started"}  # fmt: skip
        (tmp_path / f"nccl_trace_rank_{rank}").write_text(json.dumps({"entries": [entry]}))
    (tmp_path / "nccl_trace_rank_2").write_bytes(b"\x80\x04c\x1b]0;pwned\x07\nsystem\n.")
    files = [str(tmp_path / f"nccl_trace_rank_{rank}") for rank in range(3)]
    assert main(["stacks", "flight-recorder", *files]) == 0
    out = capsys.readouterr().out
    no_escape_reaches(out)
    assert "process group 0\\x1b]0;pwned\\x07: ranks [1] are behind" in out
    assert "global \\x1b]0;pwned\\x07.system refused" in out  # the refused dump's note


def test_diagnose_prints_a_hostile_log_line_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "job.err"
    log.write_text(f"RuntimeError: CUDA error: an illegal memory access was encountered{FORGED}\n")
    main(["diagnose", str(log)])
    out = capsys.readouterr().out
    no_escape_reaches(out)
    assert "illegal memory access" in out
