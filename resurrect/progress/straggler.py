"""Stragglers: a rank consistently slower than its peers, and whether a restart pays off.

Pure functions and a small state machine, fed per-rank step times (from rank-prefixed
progress lines that print a step time, or any per-rank timing source):

* :class:`StragglerDetector` — a rank whose recent median step time exceeds the median of
  its peers' by at least ``straggler_threshold`` (a fraction: 0.25 = 25 % slower),
  continuously for ``straggler_duration_s``, is a straggler;
* :func:`restart_decision` — what the slowdown costs over the rest of the run against what a
  restart costs (measured recovery time + recomputing the steps since the last checkpoint),
  with the arithmetic written out for the recovery's notes.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from resurrect.contracts import ProgressPolicy

SAMPLES_KEPT = 32


@dataclass(frozen=True, slots=True)
class StragglerFinding:
    rank: int
    node: str | None
    step_time_s: float  # the straggler's recent median
    peers_step_time_s: float  # its peers' median
    slowdown: float  # fraction slower than its peers
    slow_for_s: float

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return (
            f"rank {self.rank}{where} is {self.slowdown:.0%} slower than its peers"
            f" ({self.step_time_s:.3f} s vs {self.peers_step_time_s:.3f} s per step)"
            f" for {self.slow_for_s:.0f} s"
        )


@dataclass
class StragglerDetector:
    policy: ProgressPolicy
    samples: dict[int, deque[tuple[float, float]]] = field(default_factory=dict)
    nodes: dict[int, str] = field(default_factory=dict)
    slow_since: dict[int, float] = field(default_factory=dict)

    def observe(self, rank: int, step_time_s: float, now: float, node: str | None = None) -> None:
        if step_time_s <= 0:
            return
        self.samples.setdefault(rank, deque(maxlen=SAMPLES_KEPT)).append((now, step_time_s))
        if node:
            self.nodes[rank] = node

    def _recent(self, now: float) -> dict[int, float]:
        """Each rank's median step time over the last two policy durations."""
        horizon = now - 2 * self.policy.straggler_duration_s
        medians = {}
        for rank, series in self.samples.items():
            recent = [t for at, t in series if at >= horizon]
            if recent:
                medians[rank] = statistics.median(recent)
        return medians

    def check(self, now: float) -> StragglerFinding | None:
        """The slowest rank that has been a straggler for the policy duration, else None."""
        medians = self._recent(now)
        if len(medians) < 2:
            self.slow_since.clear()
            return None
        found: list[StragglerFinding] = []
        for rank, mine in medians.items():
            peers = statistics.median(t for r, t in medians.items() if r != rank)
            slowdown = mine / peers - 1.0 if peers > 0 else 0.0
            if slowdown < self.policy.straggler_threshold:
                self.slow_since.pop(rank, None)
                continue
            since = self.slow_since.setdefault(rank, now)
            if now - since >= self.policy.straggler_duration_s:
                found.append(
                    StragglerFinding(rank, self.nodes.get(rank), mine, peers, slowdown, now - since)
                )
        return max(found, key=lambda f: f.slowdown) if found else None


@dataclass(frozen=True, slots=True)
class RestartDecision:
    action: Literal["notify", "restart"]
    slowdown_cost_s: float
    restart_cost_s: float
    note: str
    nodes: tuple[str | None, ...] = ()  # the straggler's node, when known


def restart_decision(
    finding: StragglerFinding,
    policy: ProgressPolicy,
    *,
    remaining_steps: int | None,
    recovery_s: float,
    steps_since_checkpoint: int,
) -> RestartDecision:
    """Notify (the default), or drain and restart when the policy allows it and the time the
    slowdown will cost over the rest of the run exceeds what a restart costs."""
    healthy = finding.peers_step_time_s
    slowed = healthy * (1.0 + finding.slowdown)  # a synchronous job runs at its slowest rank
    if remaining_steps is None:
        return RestartDecision(
            "notify",
            0.0,
            0.0,
            f"{finding.describe()}; remaining steps unknown: notify only",
            (finding.node,),
        )
    slowdown_cost = remaining_steps * (slowed - healthy)
    recompute = steps_since_checkpoint * healthy
    restart_cost = recovery_s + recompute
    arithmetic = (
        f"slowdown cost = {remaining_steps} remaining steps x ({slowed:.3f} - {healthy:.3f}) s"
        f" = {slowdown_cost:.0f} s; restart cost = {recovery_s:.0f} s recovery"
        f" + {steps_since_checkpoint} steps x {healthy:.3f} s recompute = {restart_cost:.0f} s"
    )
    pays = slowdown_cost > restart_cost
    if policy.straggler_action == "restart" and pays:
        return RestartDecision(
            "restart", slowdown_cost, restart_cost,
            f"{finding.describe()}; {arithmetic}: drain and restart", (finding.node,),
        )  # fmt: skip
    why = (
        "policy straggler_action is notify"
        if policy.straggler_action == "notify"
        else "a restart would cost more than it saves"
    )
    note = f"{finding.describe()}; {arithmetic}: notify ({why})"
    return RestartDecision("notify", slowdown_cost, restart_cost, note, (finding.node,))
