"""Stragglers: a rank consistently slower than its peers, and whether a restart pays off.

Pure functions and a small state machine, fed from either of two sources:

* per-rank step times (rank-prefixed progress lines that print a step time): a rank whose
  recent median exceeds its peers' median by the fraction ``straggler_threshold``;
* samples of who waits (:mod:`resurrect.stacks.sampling`): in a synchronous job every rank
  runs at the slowest one's pace, so step times alone cannot tell who is slow, but the ranks
  that are ahead wait for the one behind. If a rank's peers wait a share ``w_p`` of the time
  and it waits ``w_s``, the job loses ``lost = w_p - w_s`` of its time to it: it is
  ``lost / (1 - lost)`` slower than it would be without it;
* per-GPU SM clocks from NVML (:mod:`resurrect.sensors.node_agent.gpu_activity`), mapped to
  ranks through Slurm's GPU binding: a busy GPU whose median SM clock is lower than its busy
  peers' runs its rank's compute that much slower (``peers / mine - 1``). This source adds
  to the other two: per rank, the larger lag counts.

:class:`StragglerDetector` names a rank slower by at least the threshold continuously for
``straggler_duration_s``. :func:`restart_decision` weighs what the slowdown costs over the
rest of the run against what a restart costs (recovery time + recomputing the steps since the
last checkpoint), with the arithmetic written out for the recovery's notes.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from resurrect.contracts import ProgressPolicy

SAMPLES_KEPT = 32
WAIT_SAMPLES_KEPT = 400
WAIT_WINDOW_S = 10.0  # wait shares are judged over this recent window
MIN_WAIT_SAMPLES = 10
MAX_SLOWDOWN = 100.0
# A GPU's clock says how fast its rank computes only while it computes.
BUSY_UTILISATION_PCT = 50
Source = Literal["step_times", "waits", "gpu_clocks"]


@dataclass(frozen=True, slots=True)
class RankLag:
    """How much slower one rank is than its peers, and the step times behind it if known."""

    rank: int
    slowdown: float
    step_time_s: float | None = None
    peers_step_time_s: float | None = None
    source: Source = "step_times"


def lags_from_step_times(medians: dict[int, float]) -> list[RankLag]:
    """Each rank's lag from per-rank median step times."""
    lags = []
    for rank, mine in medians.items():
        peers = statistics.median(t for r, t in medians.items() if r != rank)
        slowdown = min(MAX_SLOWDOWN, mine / peers - 1.0) if peers > 0 else 0.0
        lags.append(RankLag(rank, slowdown, mine, peers))
    return lags


def lags_from_wait_shares(shares: dict[int, float], job_step_time_s: float | None) -> list[RankLag]:
    """Each rank's lag from the share of samples its peers and it spent waiting.

    The job's step time (what it runs at now) is the straggler's; without it, the peers'
    would be ``step x (1 - lost)``."""
    lags = []
    for rank, mine in shares.items():
        peers = statistics.median(w for r, w in shares.items() if r != rank)
        lost = max(0.0, peers - mine)
        slowdown = MAX_SLOWDOWN if lost >= 1.0 else min(MAX_SLOWDOWN, lost / (1.0 - lost))
        healthy = job_step_time_s * (1.0 - lost) if job_step_time_s else None
        lags.append(RankLag(rank, slowdown, job_step_time_s, healthy, "waits"))
    return lags


def lags_from_gpu_clocks(clocks: dict[int, float], job_step_time_s: float | None) -> list[RankLag]:
    """Each rank's lag from the median SM clock of its (busy) GPU against its peers'."""
    lags = []
    for rank, mine in clocks.items():
        peers = statistics.median(c for r, c in clocks.items() if r != rank)
        slowdown = min(MAX_SLOWDOWN, max(0.0, peers / mine - 1.0)) if mine > 0 else MAX_SLOWDOWN
        healthy = job_step_time_s / (1.0 + slowdown) if job_step_time_s else None
        lags.append(RankLag(rank, slowdown, job_step_time_s, healthy, "gpu_clocks"))
    return lags


@dataclass(frozen=True, slots=True)
class StragglerFinding:
    rank: int
    node: str | None
    step_time_s: float | None  # the straggler's (the job's pace), if known
    peers_step_time_s: float | None  # what its peers would run at, if known
    slowdown: float  # fraction slower than its peers
    slow_for_s: float
    source: Source = "step_times"

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        times = ""
        if self.step_time_s is not None and self.peers_step_time_s is not None:
            times = f" ({self.step_time_s:.3f} s vs {self.peers_step_time_s:.3f} s per step)"
        how = {
            "waits": "its peers wait for it",
            "step_times": "per-rank step times",
            "gpu_clocks": "its GPU's SM clock against its peers'",
        }[self.source]
        return (
            f"rank {self.rank}{where} is {self.slowdown:.0%} slower than its peers{times}"
            f" for {self.slow_for_s:.0f} s ({how})"
        )


@dataclass
class StragglerDetector:
    policy: ProgressPolicy
    samples: dict[int, deque[tuple[float, float]]] = field(default_factory=dict)
    waits: dict[int, deque[tuple[float, bool]]] = field(default_factory=dict)
    gpu_clocks: dict[int, deque[tuple[float, float]]] = field(default_factory=dict)
    nodes: dict[int, str] = field(default_factory=dict)
    slow_since: dict[int, float] = field(default_factory=dict)

    def observe(self, rank: int, step_time_s: float, now: float, node: str | None = None) -> None:
        """A step time one rank printed."""
        if step_time_s <= 0:
            return
        self.samples.setdefault(rank, deque(maxlen=SAMPLES_KEPT)).append((now, step_time_s))
        if node:
            self.nodes[rank] = node

    def observe_wait(self, rank: int, waiting: bool, now: float, node: str | None = None) -> None:
        """One sample of whether a rank was waiting (for its peers)."""
        self.waits.setdefault(rank, deque(maxlen=WAIT_SAMPLES_KEPT)).append((now, waiting))
        if node:
            self.nodes[rank] = node

    def observe_gpu(
        self, rank: int, sm_clock_mhz: float, utilisation_pct: float, now: float, node: str | None
    ) -> None:
        """One reading of the SM clock of a rank's GPU (kept only while the GPU is busy)."""
        if utilisation_pct < BUSY_UTILISATION_PCT or sm_clock_mhz <= 0:
            return
        series = self.gpu_clocks.setdefault(rank, deque(maxlen=WAIT_SAMPLES_KEPT))
        series.append((now, sm_clock_mhz))
        if node:
            self.nodes[rank] = node

    def _medians(
        self, series_by_rank: dict[int, deque[tuple[float, float]]], now: float
    ) -> dict[int, float]:
        """Each rank's median over the last two policy durations."""
        horizon = now - 2 * self.policy.straggler_duration_s
        medians = {}
        for rank, series in series_by_rank.items():
            recent = [t for at, t in series if at >= horizon]
            if recent:
                medians[rank] = statistics.median(recent)
        return medians

    def _wait_shares(self, now: float) -> dict[int, float]:
        horizon = now - WAIT_WINDOW_S
        shares = {}
        for rank, series in self.waits.items():
            recent = [w for at, w in series if at >= horizon]
            if len(recent) >= MIN_WAIT_SAMPLES:
                shares[rank] = sum(recent) / len(recent)
        return shares

    def lags(self, now: float, job_step_time_s: float | None = None) -> list[RankLag]:
        """Per-rank lags from step times when two or more ranks print them, else from waits;
        GPU clocks (two or more ranks' GPUs busy) add to either: the larger lag counts."""
        medians = self._medians(self.samples, now)
        shares = self._wait_shares(now)
        if len(medians) >= 2:
            lags = lags_from_step_times(medians)
        elif len(shares) >= 2:
            lags = lags_from_wait_shares(shares, job_step_time_s)
        else:
            lags = []
        clocks = self._medians(self.gpu_clocks, now)
        if len(clocks) < 2:
            return lags
        worst = {lag.rank: lag for lag in lags}
        for lag in lags_from_gpu_clocks(clocks, job_step_time_s):
            if lag.rank not in worst or lag.slowdown > worst[lag.rank].slowdown:
                worst[lag.rank] = lag
        return sorted(worst.values(), key=lambda lag: lag.rank)

    def check(self, now: float, job_step_time_s: float | None = None) -> StragglerFinding | None:
        """The slowest rank that has been a straggler for the policy duration, else None."""
        lags = self.lags(now, job_step_time_s)
        if not lags:
            self.slow_since.clear()
            return None
        found: list[StragglerFinding] = []
        for lag in lags:
            if lag.slowdown < self.policy.straggler_threshold:
                self.slow_since.pop(lag.rank, None)
                continue
            since = self.slow_since.setdefault(lag.rank, now)
            if now - since >= self.policy.straggler_duration_s:
                found.append(
                    StragglerFinding(
                        lag.rank,
                        self.nodes.get(lag.rank),
                        lag.step_time_s,
                        lag.peers_step_time_s,
                        lag.slowdown,
                        now - since,
                        lag.source,
                    )
                )
        return max(found, key=lambda f: f.slowdown) if found else None


@dataclass(frozen=True, slots=True)
class RestartDecision:
    action: Literal["notify", "restart"]
    slowdown_cost_s: float
    restart_cost_s: float
    note: str
    finding: StragglerFinding


def restart_decision(
    finding: StragglerFinding,
    policy: ProgressPolicy,
    *,
    remaining_steps: int | None,
    recovery_s: float,
    steps_since_checkpoint: int,
    recovery_measured: bool = False,
) -> RestartDecision:
    """Notify (the default), or restart when the policy allows it and the time the
    slowdown will cost over the rest of the run exceeds what a restart costs."""
    healthy = finding.peers_step_time_s
    if remaining_steps is None or healthy is None:
        unknown = "remaining steps" if remaining_steps is None else "step time"
        return RestartDecision(
            "notify", 0.0, 0.0, f"{finding.describe()}; {unknown} unknown: notify only",
            finding,
        )  # fmt: skip
    slowed = healthy * (1.0 + finding.slowdown)  # a synchronous job runs at its slowest rank
    slowdown_cost = remaining_steps * (slowed - healthy)
    recompute = steps_since_checkpoint * healthy
    restart_cost = recovery_s + recompute
    arithmetic = (
        f"slowdown cost = {remaining_steps} remaining steps x ({slowed:.3f} - {healthy:.3f}) s"
        f" = {slowdown_cost:.0f} s; restart cost = {recovery_s:.0f} s recovery"
        f" ({'measured' if recovery_measured else 'assumed'})"
        f" + {steps_since_checkpoint} steps x {healthy:.3f} s recompute = {restart_cost:.0f} s"
    )
    pays = slowdown_cost > restart_cost
    if policy.straggler_action == "restart" and pays:
        return RestartDecision(
            "restart", slowdown_cost, restart_cost,
            f"{finding.describe()}; {arithmetic}: restart (its node drained only on hardware"
            " evidence)", finding,
        )  # fmt: skip
    why = (
        "policy straggler_action is notify"
        if policy.straggler_action == "notify"
        else "a restart would cost more than it saves"
    )
    note = f"{finding.describe()}; {arithmetic}: notify ({why})"
    return RestartDecision("notify", slowdown_cost, restart_cost, note, finding)
