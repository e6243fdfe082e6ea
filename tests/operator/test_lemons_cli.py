"""``resurrect nodes --lemons``: what an operator reads (job-controlled text escaped)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

import pytest

from resurrect.config import ResurrectConfig
from resurrect.lemons.models import LemonRules, NodeIncident
from resurrect.lemons.score import lemon_score
from resurrect.operator import cli

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def rows() -> list[dict[str, Any]]:
    incidents = [
        NodeIncident(
            incident=f"recover/c/{job}/0",
            job_id=job,
            at=NOW,
            fault_class="gpu.hardware",
            kind="xid",
            tier="independent",
            detail="node agent: xid.fallen_off_bus: \x1b[31mGPU gone",
        )
        for job in ("11", "12", "13")
    ]
    score = lemon_score("gpu-7", incidents, [], NOW, LemonRules())
    return [score.model_dump(mode="json")]


def test_each_lemon_is_shown_with_its_verdict_and_the_incidents_behind_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def read(config: ResurrectConfig, node: str | None = None) -> list[dict[str, Any]]:
        return rows()

    monkeypatch.setattr(cli, "lemons_json", read)
    args = argparse.Namespace(node=None, json=False)
    assert cli._lemons(args, ResurrectConfig()) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "gpu-7",
        "score",
        "3.00",
        "LEMON,",
        "due",
        "for",
        "draining",
        "(3",
        "jobs",
        "in",
        "the",
        "window)",
        "(in",
        "service",
        "100%)",
    ]
    assert len(lines) == 4 and all("job 1" in line for line in lines[1:])
    assert all("\x1b" not in line and "\\x1b[31mGPU gone" in line for line in lines[1:])
