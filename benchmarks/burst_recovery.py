"""Burst recovery throughput on the embedded default: ``--jobs`` jobs lose a node at the same
moment, each reported by three sensors, recovered by the real worker against the embedded
Temporal dev server (SQLite) with an in-memory scheduler.

Each variant starts its own dev server and worker and is measured in the same run:

* ``baseline``: the dev server as resurrect has started it so far (its own SQLite settings);
* ``wal``: ``--sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal``.

Checked for each: every job requeued exactly once, no node drained twice. Reported: the
recoveries per second (first report to last workflow closed), the history events of a
recovery (mean over a sample, and by type for one), and the CPU seconds per recovery of the
dev server and of this process (worker, reports, in-memory scheduler): on 2 cores their sum
bounds the throughput.

    python benchmarks/burst_recovery.py [--jobs 200] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from resurrect.config import ResurrectConfig, TemporalSettings
from resurrect.contracts import FaultClass, Interruption, JobInfo, JobState, NodeInfo
from resurrect.sensors.report import report_interruption
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal, free_port
from resurrect.testing import FakeScheduler
from resurrect.workers.recovery_worker import build_worker

OPT_IN = '{"resurrect": {"max_restarts": 3}}'
SOURCES = ("slurm_watcher", "log_tail", "node_agent")
WAL = ("journal_mode=wal", "synchronous=normal")


def cluster(jobs: int, name: str) -> FakeScheduler:
    """``jobs`` jobs on two nodes each; the second node of every job is down."""
    nodes = []
    for index in range(jobs):
        nodes.append(NodeInfo(name=f"a{index:05d}", state="ALLOCATED"))
        nodes.append(NodeInfo(name=f"b{index:05d}", state="DOWN", flags=["NOT_RESPONDING"]))
    nodes += [NodeInfo(name=f"spare{index:05d}", state="IDLE") for index in range(2 * jobs)]
    scheduler = FakeScheduler(nodes, cluster_name=name)
    for index in range(jobs):
        job_id = str(1000 + index)
        scheduler.jobs[job_id] = JobInfo(
            job_id=job_id,
            name="train",
            state=JobState.RUNNING,
            user="alice",
            nodes=[f"a{index:05d}", f"b{index:05d}"],
            num_nodes=2,
            comment=OPT_IN,
        )
    return scheduler


def reports(config: ResurrectConfig, scheduler: FakeScheduler) -> list[Interruption]:
    out = []
    for source in SOURCES:
        for job in scheduler.jobs.values():
            out.append(
                Interruption(
                    cluster=config.cluster.name,
                    job_id=job.job_id,
                    restart_count=0,
                    source=source,
                    reason=f"{source}: node {job.nodes[1]} lost",
                    observed_at=datetime.now(UTC),
                    job_state=JobState.RUNNING,
                    nodes=list(job.nodes),
                    suspect_nodes=[job.nodes[1]],
                    fault_hint=FaultClass.NODE_LOST,
                )
            )
    return out


def server_cpu_s(server: EmbeddedTemporal) -> float:
    assert server.process is not None
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks


async def burst(jobs: int, pragmas: tuple[str, ...], state: Path) -> dict[str, Any]:
    server = EmbeddedTemporal(
        state_dir=state, port=free_port(), ui_port=None, sqlite_pragmas=pragmas
    )
    server.start()
    try:
        client: Client = await connect(TemporalSettings(), address=server.address, attempts=20)
        config = ResurrectConfig.model_validate(
            {
                "mode": "act",
                "cluster": {"name": f"burst{uuid.uuid4().hex[:6]}"},
                "temporal": {"task_queue": f"burst-{uuid.uuid4().hex}", "state_dir": str(state)},
                "isolation": {"max_drain_fraction": 1.0},
                "recovery": {"wait_running_timeout_s": 120, "activity_timeout_s": 60},
            }
        )
        scheduler = cluster(jobs, config.cluster.name)
        batch = reports(config, scheduler)
        worker = build_worker(client, config, scheduler)
        async with worker:
            cpu0, own0 = server_cpu_s(server), time.process_time()
            started = time.monotonic()
            ids = await asyncio.gather(
                *(
                    report_interruption(client, r, task_queue=config.temporal.task_queue)
                    for r in batch
                )
            )
            unique = sorted(set(ids))
            await asyncio.gather(*(client.get_workflow_handle(i).result() for i in unique))
            seconds = time.monotonic() - started
            cpu, own = server_cpu_s(server) - cpu0, time.process_time() - own0
            sample = unique[:: max(1, len(unique) // 10)]
            histories = [await client.get_workflow_handle(i).fetch_history() for i in sample]
            events = [len(h.events) for h in histories]
            kinds = Counter(
                EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
                for e in histories[0].events
            )
        requeues = Counter(j for op, j in scheduler.calls if op == "requeue")
        drains = Counter(n for op, n in scheduler.calls if op == "drain")
        return {
            "recoveries": len(unique),
            "seconds": round(seconds, 2),
            "recoveries_per_s": round(len(unique) / seconds, 2),
            "history_events_per_recovery": round(statistics.mean(events), 1),
            "history_events_by_type": dict(kinds.most_common()),
            "server_cpu_s_per_recovery": round(cpu / len(unique), 3),
            # this process: the worker, the three sensors' reports, the in-memory scheduler
            "worker_cpu_s_per_recovery": round(own / len(unique), 3),
            "requeued_exactly_once": len(requeues) == jobs
            and all(count == 1 for count in requeues.values()),
            "double_drains": sum(1 for count in drains.values() if count > 1),
        }
    finally:
        server.stop()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    pragmas = tuple(args.pragma) if args.pragma else WAL
    with tempfile.TemporaryDirectory(prefix="burst-") as tmp:
        base = await burst(args.jobs, (), Path(tmp) / "baseline")
        wal = await burst(args.jobs, pragmas, Path(tmp) / "wal")
    return {
        "benchmark": "burst_recovery",
        "jobs": args.jobs,
        "reports_each": len(SOURCES),
        **wal,
        "sqlite_pragmas": list(pragmas),
        "baseline_recoveries_per_s": base["recoveries_per_s"],
        "baseline": {k: v for k, v in base.items() if k != "history_events_by_type"},
        "targets": {"recoveries_per_s": 30},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument(
        "--pragma", action="append", help="measure these SQLite pragmas instead of WAL"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:28} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
