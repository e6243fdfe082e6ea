"""Running the simulator: the scenarios of one question, averaged over seeded replications,
and the checkpoint interval it finds best."""

from __future__ import annotations

import math
from collections.abc import Sequence

from resurrect.goodput.simulate.engine import average, simulate_once
from resurrect.goodput.simulate.model import Mode, ScenarioResult, SimInputs, SimResult, WhatIf

DEFAULT_REPLICATIONS = 8


def scenario(
    inputs: SimInputs, knobs: WhatIf, mode: Mode, *, seed: int, replications: int
) -> ScenarioResult:
    """One scenario, the mean of ``replications`` runs seeded ``seed``, ``seed + 1``, ..."""
    runs = 1 if inputs.replay is not None else replications  # a replay draws nothing
    return average([simulate_once(inputs, knobs, mode, seed + r) for r in range(runs)])


def simulate(
    inputs: SimInputs,
    knobs: WhatIf,
    *,
    seed: int = 0,
    replications: int = DEFAULT_REPLICATIONS,
) -> SimResult:
    """As recorded, with the what-if knobs, and with no automated recovery."""
    modes: tuple[Mode, ...] = ("recorded", "what-if", "manual")
    return SimResult(
        seed=seed,
        replications=1 if inputs.replay is not None else replications,
        period_s=inputs.period_s,
        cluster_nodes=inputs.cluster_nodes,
        jobs=len(inputs.jobs),
        scenarios=[
            scenario(inputs, knobs, mode, seed=seed, replications=replications) for mode in modes
        ],
        notes=list(inputs.notes),
    )


def best_interval(
    inputs: SimInputs,
    candidates_s: Sequence[float],
    *,
    seed: int = 0,
    replications: int = DEFAULT_REPLICATIONS,
) -> float:
    """The checkpoint interval with the highest simulated goodput, refined by a parabola
    through the best candidate and its neighbours (in log interval)."""
    ordered = sorted(candidates_s)
    goodputs = [
        scenario(
            inputs,
            WhatIf(checkpoint_interval_s=interval),
            "what-if",
            seed=seed,
            replications=replications,
        ).goodput
        or 0.0
        for interval in ordered
    ]
    best = max(range(len(ordered)), key=goodputs.__getitem__)
    if best in (0, len(ordered) - 1):
        return ordered[best]
    x = [math.log(ordered[i]) for i in (best - 1, best, best + 1)]
    y = [goodputs[i] for i in (best - 1, best, best + 1)]
    denominator = (x[0] - x[1]) * (x[0] - x[2]) * (x[1] - x[2])
    a = (x[2] * (y[1] - y[0]) + x[1] * (y[0] - y[2]) + x[0] * (y[2] - y[1])) / denominator
    b = (x[2] ** 2 * (y[0] - y[1]) + x[1] ** 2 * (y[2] - y[0]) + x[0] ** 2 * (y[1] - y[2])) / (
        denominator
    )
    if a >= 0:
        return ordered[best]
    return math.exp(min(max(-b / (2 * a), x[0]), x[2]))
