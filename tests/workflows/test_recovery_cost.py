"""What one recovery asks of Temporal and of the scheduler does not grow with the recoveries
in flight or with the fleet: a burst of 4N node losses against a burst of N (N = 10 here, to
fit the suite's 2 cores; ``RESURRECT_COST_FEW=50 RESURRECT_COST_MANY=200`` for the issue's
sizes, which benchmarks/burst.py also reports), and a burst of N in a fleet of 5,000 nodes,
50,000 queued jobs, 100 lemon-scored nodes and 500 nodes resurrect keeps out (drained) against
one in a fleet of 2N nodes and 2N jobs.

Each burst runs on the real dev server with the real worker (its own client, every RPC
counted by kind: workflow queries, history fetches, visibility lists and counts, signals,
starts, updates, describes, and the bytes one call of each kind sent) and the in-memory
cluster (its calls counted by method, and the rows its list reads return); the lemon scores
the worker computes are counted too (a recovery that scored every node on record would cost
CPU in the fleet's size without a single call more). One recovery runs first, alone: what a
process reads once and keeps (the cluster's shape, the drain census, the lemon board, the
checkpoint advice's cluster rates) is read then, as a running worker has it, and kept through
the burst (those are read again per interval of time, never per recovery); the counts are of
the burst after it. Any figure a recovery reads across recoveries falls under these counts: a
feature that reads it per recovery makes them grow."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.builders import make_config
from support.node_loss import SOURCES, lost_node_cluster, node_loss_reports
from support.workers import resurrect_workers
from temporalio.client import Client

from resurrect.config import ResurrectConfig, TemporalSettings
from resurrect.contracts import JobInfo, JobState, NodeInfo
from resurrect.lemons import records as lemon_records
from resurrect.lemons.board import board_for
from resurrect.lemons.models import NodeIncident
from resurrect.lemons.records import report_incidents
from resurrect.operator import budget_client
from resurrect.scheduler.base import DRAIN_REASON_PREFIX
from resurrect.sensors.report import report_interruption
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal, free_port
from resurrect.testing.counting import (
    RPC_KINDS,
    CallCounts,
    count_scheduler_calls,
    count_temporal_calls,
    counted,
)
from resurrect.workers.recovery_worker import read_kept_figures

pytestmark = pytest.mark.temporal

# The bursts: recoveries in flight, few against many (the suite's 2 cores bound their size).
FEW, MANY = (
    int(os.environ.get("RESURRECT_COST_FEW", "10")),
    int(os.environ.get("RESURRECT_COST_MANY", "40")),
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTemporal]:
    """A dev server of these bursts' own, set up as resurrect starts it (SQLite in WAL)."""
    state = Path(tmp_path_factory.mktemp("cost-temporal"))
    started = EmbeddedTemporal(
        state_dir=state,
        port=free_port(),
        ui_port=None,
        sqlite_pragmas=("journal_mode=wal", "synchronous=normal"),
    )
    started.start()
    try:
        yield started
    finally:
        started.stop()


# Per recovery, at most (kind: calls): what a node-loss recovery needs, with room for a poll
# more or an activity run again (a quick attempt given up under load); nothing here depends on
# how many other recoveries or nodes there are. Measured: query 2.3-3.4, describe 1.0, signal
# 2.3-3.4, visibility 1.3-2.4, history 1.0, update 0.6-1 (a burst's reservations batched).
TEMPORAL_CEILING = {
    "query": 4.5,  # the job's two nodes' agents (asked again when the assessment runs again)
    # the lost node's repair workflow, claimed once (then known); the drain step asks its
    # record only when the budget's answer cannot rule out an earlier drain of this recovery
    "describe": 1.5,
    "history": 3.0,  # the job's own recoveries, for its checkpoint advice
    "visibility": 3.0,  # the job's own recoveries (advice)
    "signal": 4.0,  # the lost node's repair workflow: incident and drain reports
    "update": 1.5,  # drain reservations
    "start": 0.5,
    "other": 0.5,
}
# Lemon scores per recovery, at most: the nodes it implicates (the lost node, scored as it is
# noted on the board and again in the assessment), and the lemons the board ranks (none here).
SCORES_CEILING = 4.0


def grows(small: dict[str, float], large: dict[str, float]) -> dict[str, tuple[float, float]]:
    """The figures of ``large`` above ``small``'s by more than a poll's jitter. Request bytes
    grow only when they grow both per recovery and per call: a poll more under load adds a
    call's bytes to a recovery but none to a call, reservations batched in a burst put more
    into a call but less into a recovery; a request that carries the fleet grows both."""

    def above(name: str) -> bool:
        return large.get(name, 0.0) > small.get(name, 0.0) * 1.25 + 0.5

    return {
        name: (small.get(name, 0.0), value)
        for name, value in large.items()
        if not name.endswith(" bytes/call")
        and above(name)
        and (not name.endswith(" bytes") or above(f"{name}/call"))
    }


def enlarge_fleet(
    scheduler: Any, *, idle_nodes: int, queued_jobs: int, held_nodes: int = 0
) -> None:
    """Idle nodes, pending jobs and nodes resurrect drained earlier (and keeps out) beside the
    burst's own (nothing reads them per recovery, nor sends them with each reservation)."""
    for index in range(idle_nodes):
        scheduler.nodes[f"idle{index:05d}"] = NodeInfo(name=f"idle{index:05d}", state="IDLE")
    for index in range(held_nodes):
        name = f"held{index:05d}"
        reason = f"{DRAIN_REASON_PREFIX} gpu.hardware job 9 [recover/earlier/{index}]"
        scheduler.nodes[name] = NodeInfo(name=name, state="DRAIN", reason=reason)
    for index in range(queued_jobs):
        job_id = str(500_000 + index)
        scheduler.jobs[job_id] = JobInfo(
            job_id=job_id, name="queued", state=JobState.PENDING, user="bob", num_nodes=8
        )


async def score_nodes(client: Client, config: ResurrectConfig, count: int) -> None:
    """``count`` nodes with a lemon score: an independent incident each in its record."""
    now = datetime.now(UTC)
    incidents = {
        f"scored{index:05d}": NodeIncident(
            incident=f"earlier-{index}",
            job_id="7",
            at=now,
            fault_class="gpu.hardware",
            kind="xid",
            tier="independent",
        )
        for index in range(count)
    }
    await report_incidents(client, config, incidents)


async def burst_costs(
    server: EmbeddedTemporal,
    tmp_path: Path,
    jobs: int,
    monkeypatch: pytest.MonkeyPatch,
    *,
    idle_nodes: int = 0,
    queued_jobs: int = 0,
    scored_nodes: int = 0,
    held_nodes: int = 0,
) -> dict[str, float]:
    """One recovery alone, then a burst of ``jobs`` node losses (three reports each): what
    the worker asked per recovery of the burst (Temporal RPCs by kind, scheduler calls and
    rows by method, lemon scores computed)."""
    config = make_config(
        tmp_path,
        mode="act",
        isolation={"max_drain_fraction": 1.0},
        recovery={"wait_running_timeout_s": 120, "activity_timeout_s": 60},
    )
    scheduler = lost_node_cluster(jobs + 1, config.cluster.name)
    by_job: dict[str, list[Any]] = {}
    for source in SOURCES:
        for report in node_loss_reports(scheduler, source):
            by_job.setdefault(report.job_id, []).append(report)
    enlarge_fleet(scheduler, idle_nodes=idle_nodes, queued_jobs=queued_jobs, held_nodes=held_nodes)
    reports = await connect(TemporalSettings(), address=server.address, attempts=10)
    worker_client = await connect(TemporalSettings(), address=server.address, attempts=10)
    temporal = count_temporal_calls(worker_client)
    calls = count_scheduler_calls(scheduler)
    scores = CallCounts()
    scoring = counted("lemon_score", lemon_records.lemon_score, scores)
    monkeypatch.setattr(lemon_records, "lemon_score", scoring)
    async with resurrect_workers(worker_client, config, scheduler):
        await score_nodes(worker_client, config, scored_nodes)
        await read_kept_figures(worker_client, config, scheduler)  # as the worker starts
        first, *rest = sorted(by_job)
        await recover(reports, config, by_job[first])
        # what the process keeps is read again after an interval of time, not per recovery:
        # not within the burst measured here
        board_for(worker_client, config).max_age_s = 3600
        temporal.clear()
        calls.clear()
        scores.clear()
        await asyncio.gather(*(recover(reports, config, by_job[job]) for job in rest))
    requeued = Counter(job for op, job in scheduler.calls if op == "requeuehold")
    assert sorted(requeued) == sorted(by_job) and set(requeued.values()) == {1}
    return {
        **per_recovery(temporal, jobs, RPC_KINDS),
        **per_recovery(calls, jobs),
        **per_recovery(scores, jobs),
    }


async def recover(client: Client, config: ResurrectConfig, reports: list[Any]) -> None:
    """The reports of one job's node loss, then its recovery's end."""
    queue = config.temporal.task_queue
    ids = {await report_interruption(client, r, task_queue=queue) for r in reports}
    (workflow_id,) = ids
    await asyncio.wait_for(client.get_workflow_handle(workflow_id).result(), 120)


def per_recovery(
    counts: CallCounts, recoveries: int, kinds: dict[str, str] | Any = None
) -> dict[str, float]:
    """Calls, rows and request bytes per recovery, and request bytes per call."""
    figures = counts.per(recoveries, kinds)
    figures.update(counts.bytes_per_call(kinds))
    return {name: round(value, 2) for name, value in figures.items()}


async def test_a_recoverys_cost_grows_neither_with_recoveries_in_flight_nor_with_the_fleet(
    server: EmbeddedTemporal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the drain census and the cluster's shape as read by the first recovery, kept
    monkeypatch.setattr(budget_client._HELD, "max_age_s", 3600.0)
    monkeypatch.setattr(budget_client._SHAPES, "max_age_s", 3600.0)
    # FEW jobs on 2 * FEW nodes (and as many spares), FEW running jobs and FEW queued
    small = await burst_costs(server, tmp_path / "small", FEW, monkeypatch, queued_jobs=FEW)
    in_flight = await burst_costs(
        server, tmp_path / "in_flight", MANY, monkeypatch, queued_jobs=MANY
    )
    fleet = await burst_costs(
        server,
        tmp_path / "fleet",
        FEW,
        monkeypatch,
        idle_nodes=5_000,
        queued_jobs=50_000,
        scored_nodes=100,
        held_nodes=500,
    )
    print({f"burst {FEW}": small, f"burst {MANY}": in_flight, "large fleet": fleet})
    assert not grows(small, in_flight), ("with recoveries in flight", small, in_flight)
    assert not grows(small, fleet), ("with the fleet", small, fleet)
    for name, ceiling in TEMPORAL_CEILING.items():
        for figures in (small, in_flight, fleet):
            assert figures.get(name, 0.0) <= ceiling, (name, figures)
    for figures in (small, in_flight, fleet):
        assert figures.get("lemon_score", 0.0) <= SCORES_CEILING, figures
