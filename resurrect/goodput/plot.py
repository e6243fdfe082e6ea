"""``resurrect goodput --plot``: each job's timeline, its interruptions and the lost time.

One row per job: the wall time from the job's first start, coloured by part (productive in
green, each kind of lost time in its own colour, estimated stretches hatched), a marker at
each interruption naming its fault class and what it cost, and a legend with each part's
total.
"""

from __future__ import annotations

from pathlib import Path

from resurrect.goodput.model import PART_NAMES, JobGoodput
from resurrect.goodput.render import seconds_text

COLOURS: dict[str, str] = {
    "productive": "#2e9e4f",
    "startup": "#8ecae6",
    "recompute": "#f4a259",
    "detection": "#d1495b",
    "recovery": "#7b2cbf",
    "queue": "#adb5bd",
    "unattributed": "#e9ecef",
}
LABELS: dict[str, str] = {
    "productive": "productive",
    "startup": "start-up (to first step)",
    "recompute": "recomputed work",
    "detection": "detection",
    "recovery": "recovery",
    "queue": "queue wait",
    "unattributed": "unattributed",
}


def plot_timelines(jobs: list[JobGoodput], path: Path) -> None:
    """Draw every job's timeline into ``path`` (.png or .svg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = max(1, len(jobs))
    figure, axes = plt.subplots(
        rows, 1, figsize=(12, 1.9 * rows + 1.2), squeeze=False, constrained_layout=True
    )
    for axis, job in zip(axes[:, 0], jobs, strict=False):
        _draw_job(axis, job, COLOURS)
    if not jobs:
        axes[0, 0].text(0.5, 0.5, "no recoveries in this window", ha="center", va="center")
        axes[0, 0].set_axis_off()
    totals: dict[str, float] = {name: 0.0 for name in PART_NAMES}
    for job in jobs:
        for name in PART_NAMES:
            totals[name] += job.parts[name].seconds
    handles = [
        Patch(
            facecolor=COLOURS[name],
            edgecolor="#555555",
            label=f"{LABELS[name]}: {seconds_text(totals[name])}",
        )
        for name in PART_NAMES
        if totals[name] > 0 or name == "productive"
    ]
    handles.append(Patch(facecolor="white", edgecolor="#555555", hatch="//", label="estimated"))
    figure.legend(handles=handles, loc="outside lower center", ncol=4, frameon=False, fontsize=9)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _draw_job(axis: object, job: JobGoodput, colours: dict[str, str]) -> None:
    ax = axis  # matplotlib Axes (kept untyped: matplotlib is an optional import)
    origin = job.start
    if origin is None:
        ax.set_axis_off()  # type: ignore[attr-defined]
        return
    for segment in job.segments:
        left = (segment.start - origin).total_seconds()
        ax.broken_barh(  # type: ignore[attr-defined]
            [(left, segment.seconds)],
            (0.2, 0.6),
            facecolors=colours[segment.part],
            edgecolor="#555555" if segment.part != "productive" else colours[segment.part],
            linewidth=0.5,
            hatch="//" if segment.basis == "estimated" else None,
        )
    for recovery in job.recoveries:
        start = next(
            (
                s.start
                for s in job.segments
                if s.part == "recovery" and s.attempt == recovery.attempt
            ),
            None,
        )
        if start is None:
            continue
        x = (start - origin).total_seconds()
        ax.axvline(x, color="#222222", linewidth=1, linestyle="--")  # type: ignore[attr-defined]
        lost = sum(recovery.lost_s.values())
        ax.annotate(  # type: ignore[attr-defined]
            f"{recovery.fault_class} ({recovery.outcome or 'running'})\nlost {seconds_text(lost)}",
            (x, 0.85),
            xytext=(4, 6),
            textcoords="offset points",
            fontsize=8,
            va="bottom",
        )
    goodput = "-" if job.goodput is None else f"{job.goodput * 100:.1f}%"
    ax.set_title(  # type: ignore[attr-defined]
        f"job {job.job_id} ({job.state or 'gone'}): goodput {goodput},"
        f" wall {seconds_text(job.wall_s)}, {len(job.recoveries)} interruption(s)",
        fontsize=10,
        loc="left",
    )
    ax.set_ylim(0, 1.6)  # type: ignore[attr-defined]
    ax.set_xlim(0, max(job.wall_s, 1.0))  # type: ignore[attr-defined]
    ax.set_yticks([])  # type: ignore[attr-defined]
    ax.set_xlabel("seconds since the job first started")  # type: ignore[attr-defined]
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)  # type: ignore[attr-defined]
