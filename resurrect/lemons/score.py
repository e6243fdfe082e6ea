"""A node's lemon score from its incident record: a pure function.

    score = sum over owners of min(per_owner_cap x heaviest weight,
                sum over the owner's jobs of min(per_job_cap x heaviest weight,
                                                 sum of weight x 2^(-age / h)))
            / max(in_service, min_in_service)

* **weight** by who vouches for the incident (:data:`TIER_WEIGHTS`): the node agent or Slurm
  1, resurrect's probes of the job's processes ``probe_weight`` (at most 0.25), the job's own
  output 0, always: a job can never frame a node, however much it prints.
* **decay**: an incident counts half after ``half_life_s``, a quarter after two.
* **per job**: one job adds at most ``per_job_cap`` times the weight of its heaviest
  incident, however often it fails on the node (a job whose own code breaks its nodes is a
  restart loop, not a lemon; hangs a job provokes count as one probe incident).
* **per owner**: one job owner's jobs together add at most ``per_owner_cap`` times the
  weight of their heaviest incident, however many jobs the owner starts on the node; a
  job with an incident that hardware evidence vouches for (below) counts on its own,
  as no job can provoke that evidence.
* **corroborated**: a node is a lemon (and due for draining) only with incidents from at
  least two owners, or with one incident that evidence no job can write vouches for
  (``hardware``: NVML, Slurm's node state). One user alone never makes a healthy node a
  lemon, whatever their jobs provoke.
* **normalised by node-hours in service**: ``in_service`` is the decayed fraction of time
  the node was not drained by resurrect (from the same record's drains and returns), so a
  node that was out half the time and failed as often scores twice as high. Node-hours, not
  jobs run: faults come with hours of use whatever the jobs' sizes, the record holds them,
  and a job owner cannot change them (many tiny jobs would dilute a per-job rate).

So a node in service all along scores its decayed count of independently evidenced
incidents from distinct jobs; ``lemon_score`` (default 2) is a lemon. Separately, a node is
**due for draining** when ``drain_incidents`` distinct jobs had an incident on it with
independent evidence within ``drain_window_s`` (no decay: a plain count in a window).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from resurrect.lemons.models import (
    EvidenceTier,
    LemonRules,
    LemonScore,
    NodeIncident,
    ScoredIncident,
)
from resurrect.operator.models import NodeEvent

TIER_WEIGHTS: dict[EvidenceTier, float] = {"independent": 1.0, "probe": 0.0, "job_output": 0.0}


@dataclass(frozen=True)
class OutOfService:
    """A spell the node was drained by resurrect (``end`` None: still drained)."""

    start: datetime
    end: datetime | None = None


def weight(tier: EvidenceTier, rules: LemonRules) -> float:
    """How much one incident of ``tier`` counts (before decay)."""
    return rules.probe_weight if tier == "probe" else TIER_WEIGHTS[tier]


def decay(age_s: float, half_life_s: float) -> float:
    """2^(-age / half-life); an incident from the future (clock skew) counts as new."""
    return float(2.0 ** (-max(0.0, age_s) / half_life_s))


def in_service_fraction(spells: Sequence[OutOfService], now: datetime, half_life_s: float) -> float:
    """The decayed fraction of time up to ``now`` the node was in service: each past moment
    weighted by the same decay as incidents (the integral of 2^(-age/h) is h / ln 2)."""
    total = half_life_s / math.log(2)
    out = 0.0
    for spell in spells:
        end = min(spell.end or now, now)
        if end <= spell.start:
            continue
        newest = decay((now - end).total_seconds(), half_life_s)
        oldest = decay((now - spell.start).total_seconds(), half_life_s)
        out += total * (newest - oldest)
    return max(0.0, min(1.0, 1.0 - out / total))


def lemon_score(
    node: str,
    incidents: Sequence[NodeIncident],
    spells: Sequence[OutOfService],
    now: datetime,
    rules: LemonRules,
) -> LemonScore:
    """``node``'s score now from its ``incidents`` and its ``spells`` out of service."""
    scored = [
        ScoredIncident(
            incident=item,
            weight=(w := weight(item.tier, rules)),
            contribution=w * decay((now - item.at).total_seconds(), rules.half_life_s),
        )
        for item in sorted(incidents, key=lambda i: i.at, reverse=True)
    ]
    per_job: dict[str, float] = {}
    heaviest: dict[str, float] = {}
    owner_of: dict[str, str] = {}
    for item in scored:
        job = item.incident.job_id
        per_job[job] = per_job.get(job, 0.0) + item.contribution
        heaviest[job] = max(heaviest.get(job, 0.0), item.weight)
        if item.incident.hardware:  # no job provoked it: counts as the job's own
            owner_of[job] = f"job {job} (hardware evidence)"
        else:
            owner_of.setdefault(job, owner_key(item.incident))
    per_owner: dict[str, float] = {}
    owner_heaviest: dict[str, float] = {}
    for job, value in per_job.items():
        owner = owner_of[job]
        per_owner[owner] = per_owner.get(owner, 0.0) + min(rules.per_job_cap * heaviest[job], value)
        owner_heaviest[owner] = max(owner_heaviest.get(owner, 0.0), heaviest[job])
    raw = sum(
        min(rules.per_owner_cap * owner_heaviest[owner], value)
        for owner, value in per_owner.items()
    )
    in_service = in_service_fraction(spells, now, rules.half_life_s)
    score = raw / max(in_service, rules.min_in_service)
    counted = [i.incident for i in scored if i.weight > 0]
    owners = {owner_key(i) for i in counted}
    hardware = any(i.hardware for i in counted)
    corroborated = len(owners) >= 2 or hardware
    since = now - timedelta(seconds=rules.drain_window_s)
    in_window = [i for i in incidents if i.tier == "independent" and since <= i.at <= now]
    window_jobs = sorted({i.job_id for i in in_window})
    window_corroborated = len({owner_key(i) for i in in_window}) >= 2 or any(
        i.hardware for i in in_window
    )
    return LemonScore(
        node=node,
        score=round(score, 6),
        lemon=score >= rules.lemon_score and corroborated,
        drain_due=len(window_jobs) >= rules.drain_incidents and window_corroborated,
        in_service=round(in_service, 6),
        window_jobs=window_jobs,
        owners=len(owners),
        hardware=hardware,
        incidents=scored,
    )


def owner_key(incident: NodeIncident) -> str:
    """Whose incident it is: the job's owner, or the job itself when the record predates
    owners."""
    return f"uid {incident.owner}" if incident.owner is not None else f"job {incident.job_id}"


def out_of_service(events: Sequence[NodeEvent]) -> list[OutOfService]:
    """The spells a node's repair record shows it drained by resurrect: from each drain to
    its return (or to when the drain was no longer resurrect's); the last may be open."""
    spells: list[OutOfService] = []
    start: datetime | None = None
    for event in sorted(events, key=lambda e: e.at):
        if event.kind == "drained" and start is None:
            start = event.at
        elif event.kind in ("returned", "not_ours") and start is not None:
            spells.append(OutOfService(start, event.at))
            start = None
    if start is not None:
        spells.append(OutOfService(start))
    return spells
