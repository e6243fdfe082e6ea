"""The soak's fault schedule: a pure function of the seed.

``build_schedule`` draws every injection from ``random.Random(seed)``: the same seed gives
the same kinds at the same offsets (and the same target picks: a number in [0, 1) that
chooses among the candidates the cluster offers when the injection fires, sorted by id).
The first injections are a seeded permutation of every kind asked for, so a short soak sees
each kind once; the rest follow the kinds' weights. Gaps are exponential, so faults overlap
(a fault often lands while an earlier one's recovery still runs).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from .faults import ALL_KINDS, KINDS, FaultKind


@dataclass(frozen=True)
class Injection:
    """One scheduled fault: when (seconds after the soak's start), what, which target."""

    offset_s: float
    kind: str
    pick: float  # chooses the target among the candidates at fire time
    index: int

    def choose(self, candidates: Sequence[str]) -> str | None:
        """The target this injection picks among ``candidates`` (ids, any order)."""
        if not candidates:
            return None
        ordered = sorted(candidates, key=_id_order)
        return ordered[min(int(self.pick * len(ordered)), len(ordered) - 1)]


def _id_order(value: str) -> tuple[int, str]:
    return (int(value), value) if value.isdigit() else (1 << 62, value)


def build_schedule(
    seed: int,
    duration_s: float,
    *,
    warmup_s: float = 30.0,
    settle_s: float = 30.0,
    mean_gap_s: float = 20.0,
    kinds: Sequence[FaultKind] = KINDS,
) -> list[Injection]:
    """The injections of a soak of ``duration_s``: none in the first ``warmup_s`` (jobs
    start, resurrect warms up) nor in the last ``settle_s``; ``mean_gap_s`` apart on
    average."""
    if duration_s <= warmup_s + settle_s or not kinds:
        return []
    rng = random.Random(seed)
    cover = list(kinds)
    rng.shuffle(cover)
    weights = [k.weight for k in kinds]
    if not any(weights):  # only kinds drawn when named (weight 0): evenly
        weights = [1] * len(weights)
    injections: list[Injection] = []
    t = warmup_s
    end = duration_s - settle_s
    while True:
        t += rng.expovariate(1.0 / mean_gap_s)
        if t >= end:
            return injections
        if cover:
            chosen = cover.pop(0)
        else:
            chosen = rng.choices(list(kinds), weights=weights)[0]
        injections.append(
            Injection(round(t, 3), chosen.name, round(rng.random(), 6), len(injections))
        )


def kinds_named(names: Sequence[str]) -> list[FaultKind]:
    """The kinds called ``names``, in KINDS order (ValueError for an unknown name)."""
    known = {k.name for k in ALL_KINDS}
    unknown = sorted(set(names) - known)
    if unknown:
        raise ValueError(f"unknown fault kinds: {', '.join(unknown)}")
    return [k for k in ALL_KINDS if k.name in set(names)]
