"""The goodput report as a table for people (``resurrect goodput``)."""

from __future__ import annotations

import re
from datetime import timedelta

from resurrect.errors import ConfigError
from resurrect.goodput.model import PART_NAMES, ClusterGoodput, JobGoodput, Part

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``24h``, ``7d``, ``1h30m`` -> timedelta."""
    compact = text.strip().lower()
    pieces = _DURATION.findall(compact)
    if not pieces or "".join(n + u for n, u in pieces) != compact:
        raise ConfigError(f"not a duration: {text!r} (e.g. 90s, 30m, 24h, 7d, 1h30m)")
    return timedelta(seconds=sum(float(n) * _UNIT_S[u] for n, u in pieces))


def seconds_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _part(part: Part | None) -> str:
    if part is None:
        return "-"
    return ("~" if part.basis == "estimated" and part.seconds else "") + seconds_text(part.seconds)


HEADERS = ["JOB", "STATE", "WALL", "GOODPUT", "ETTR", *[p.upper() for p in PART_NAMES], "RECOV"]


def table(jobs: list[JobGoodput], total: ClusterGoodput) -> str:
    """A fixed-width table: one row per job, then the cluster total."""
    rows: list[list[str]] = []
    for job in jobs:
        rows.append(
            [
                job.job_id,
                job.state or "gone",
                seconds_text(job.wall_s),
                _ratio(job.goodput),
                _ratio(job.ettr),
                *[_part(job.parts.get(name)) for name in PART_NAMES],
                str(len(job.recoveries)),
            ]
        )
    rows.append(
        [
            "cluster",
            f"{total.jobs} jobs",
            seconds_text(total.wall_s),
            _ratio(total.goodput),
            _ratio(total.ettr),
            *[_part(total.parts.get(name)) for name in PART_NAMES],
            str(total.recoveries),
        ]
    )
    widths = [max(len(r[i]) for r in [HEADERS, *rows]) for i in range(len(HEADERS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(HEADERS, widths, strict=True)).rstrip()]
    for index, row in enumerate(rows):
        if index == len(rows) - 1:
            lines.append("  ".join("-" * w for w in widths))
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    lines.append("~ estimated (interpolated from the measured step time); other parts measured")
    return "\n".join(lines)


def notes(jobs: list[JobGoodput]) -> list[str]:
    out = []
    for job in jobs:
        for recovery in job.recoveries:
            lost = sum(recovery.lost_s.values())
            steps = (
                f", {recovery.recomputed_steps} steps redone"
                if recovery.recomputed_steps is not None
                else ""
            )
            out.append(
                f"job {job.job_id}: {recovery.workflow_id} {recovery.fault_class}"
                f" -> {recovery.outcome or 'running'}: lost {seconds_text(lost)}{steps}"
            )
        out.extend(f"job {job.job_id}: {note}" for note in job.notes)
    return out
