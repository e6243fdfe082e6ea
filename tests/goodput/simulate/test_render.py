"""The simulator's table and chart."""

from __future__ import annotations

from pathlib import Path

from resurrect.goodput.simulate.model import WhatIf
from resurrect.goodput.simulate.render import plot, table
from resurrect.goodput.simulate.run import simulate

from .test_simulate import constant


def test_the_table_has_a_row_per_scenario_and_names_the_knobs(tmp_path: Path) -> None:
    result = simulate(constant(days=3), WhatIf(detect_s=5, spares=2), replications=2)
    text = table(result).splitlines()
    assert text[0].split()[:2] == ["SCENARIO", "GOODPUT"]
    assert [line.split()[0] for line in text[1:4]] == ["recorded", "what-if", "manual"]
    assert "what-if: detect_s=5, spares=2, manual_response_s=1800" in text
    chart = tmp_path / "what-if.png"
    plot(result, chart)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000
