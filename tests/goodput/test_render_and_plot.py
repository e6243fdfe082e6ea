"""What `resurrect goodput` shows: durations it accepts, the table, the timeline drawing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from resurrect.errors import ConfigError
from resurrect.goodput.accounting import account_job, cluster_total
from resurrect.goodput.plot import plot_timelines
from resurrect.goodput.render import notes, parse_duration, table

from .test_accounting import at, one_interruption


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("24h", 86400), ("7d", 604800), ("1h30m", 5400)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "1x", "h", "1h 30", "-5m"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_duration(text)


def test_the_table_has_a_row_per_job_a_total_and_the_estimated_marker() -> None:
    job = account_job(one_interruption(), now=at(1000))
    record = one_interruption()
    record.attempts[0].marks = record.attempts[0].marks[::7]  # the checkpoint step interpolated
    estimated = account_job(record.model_copy(update={"job_id": "8"}), now=at(1000))
    text = table([job, estimated], cluster_total([job, estimated]))
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["JOB", "STATE", "WALL", "GOODPUT", "ETTR"]
    assert lines[1].split()[:5] == ["7", "COMPLETED", "1m40s", "58.0%", "52.7%"]
    assert lines[2].split()[0] == "8" and "~" in lines[2]
    assert lines[4].split()[:3] == ["cluster", "2", "jobs"]
    assert notes([job]) == [
        "job 7: recover/c/7/0 node.lost -> recovered: lost 34.0s, 10 steps redone"
    ]


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_the_timeline_is_drawn_with_each_interruption(tmp_path: Path, suffix: str) -> None:
    job = account_job(one_interruption(), now=at(1000))
    path = tmp_path / f"timeline{suffix}"
    plot_timelines([job], path)
    assert path.stat().st_size > 5_000
    if suffix == ".svg":
        text = path.read_text()
        assert "node.lost (recovered)" in text and "lost 34.0s" in text
