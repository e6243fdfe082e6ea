"""The simulator's answer for people: a table of scenarios, and a chart (``--plot``)."""

from __future__ import annotations

from pathlib import Path

from resurrect.goodput.render import seconds_text
from resurrect.goodput.simulate.model import LOST_PARTS, ScenarioResult, SimResult

HEADERS = [
    "SCENARIO",
    "GOODPUT",
    "WITH SAVES",
    "LOST GPU-H",
    "TIME TO TRAIN",
    "FAULTS",
    "DRAINS",
    "REFUSED",
]
MEANING = {
    "recorded": "as recorded",
    "what-if": "with the what-if knobs",
    "manual": "no automated recovery",
}


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f}%"


def _row(result: ScenarioResult) -> list[str]:
    return [
        f"{result.scenario} ({MEANING[result.scenario]})",
        _ratio(result.goodput),
        _ratio(result.goodput_with_saves),
        f"{result.lost_gpu_hours:.1f}",
        "-" if result.time_to_train_s is None else seconds_text(result.time_to_train_s),
        str(result.interruptions),
        str(result.drains),
        str(result.drains_refused),
    ]


def table(result: SimResult) -> str:
    rows = [HEADERS, *(_row(s) for s in result.scenarios)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    what_if = next((s for s in result.scenarios if s.scenario == "what-if"), None)
    if what_if is not None:
        knobs = what_if.knobs.model_dump(exclude_none=True)
        lines.append("what-if: " + ", ".join(f"{k}={v:g}" for k, v in knobs.items()))
    lines.append(
        f"{result.jobs} jobs on {result.cluster_nodes} nodes over {seconds_text(result.period_s)};"
        f" mean of {result.replications} replications from seed {result.seed}"
    )
    lines.extend(result.notes)
    return "\n".join(lines)


COLOURS = {
    "startup": "#8ecae6",
    "save": "#219ebc",
    "recompute": "#f4a259",
    "detection": "#d1495b",
    "recovery": "#7b2cbf",
    "queue": "#adb5bd",
}


def plot(result: SimResult, path: Path) -> None:
    """Goodput per scenario, and its lost node-hours stacked by part."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s.scenario for s in result.scenarios]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    left.bar(names, [(s.goodput or 0) * 100 for s in result.scenarios], color="#2e9e4f")
    left.set_ylabel("goodput (%)")
    left.set_title("goodput")
    bottom = [0.0] * len(names)
    for part in LOST_PARTS:
        values = [s.lost_node_hours_by_part.get(part, 0.0) for s in result.scenarios]
        right.bar(names, values, bottom=bottom, label=part, color=COLOURS[part])
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    right.set_ylabel("lost node-hours")
    right.set_title("lost time by part")
    right.legend(fontsize=8)
    figure.savefig(path, dpi=110)
    plt.close(figure)
