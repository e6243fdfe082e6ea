"""Burst recovery throughput on the embedded default: ``--jobs`` jobs lose a node at the same
moment, each reported by three sensors (the Slurm watcher without evidence; the node agent
and the log follower with theirs), recovered by the real worker against the embedded
Temporal dev server (SQLite, WAL) with an in-memory scheduler.

Each variant starts its own dev server and worker and is measured in the same run:

* ``baseline``: today's recovery workflow, with a signal-with-start for every report (with
  or without evidence) and one task queue for every workflow: drain and requeue are
  activity tasks;
* ``lean``: what resurrect does (the default): reports without evidence only start-or-find
  the workflow, the budget and repair workflows on task queues and workers of their own
  (drain and requeue as local activities);
* with ``--levers``, each lever alone on top of ``lean``, to measure what it brings:
  ``signal_reports`` (``lean`` with a signal-with-start for every report), ``unsandboxed`` (``lean``
  without the SDK's workflow sandbox: ``temporal.workflow_sandbox`` off), ``eager``
  (``lean`` with the dev server's eager activity dispatch), ``cache4k`` (``lean`` with 4,000
  workflows cached in the worker instead of 1,000), ``processes1`` / ``processes2``
  (``lean`` with one / two worker processes instead of the worker in this process; they
  share the in-memory cluster over a Unix socket, which costs them some CPU of their own:
  compare the two with each other), ``shared_queue`` (``lean`` with the budget and repair
  workflows on the recoveries' task queue, ``temporal.operator_task_queue`` set to it: drain
  and requeue are activity tasks then), ``wft500`` (``lean`` with 500 workflow-task slots
  instead of the SDK's default), ``no_repair`` (``lean`` without node-repair workflows: what
  they cost; not a setting to use). ``--skip-baseline`` measures only ``lean`` and the
  levers asked for.

Checked for each: every job requeued exactly once, no node drained twice. Reported: the
recoveries per second (first report to last workflow closed), beside the same server's rate
for an empty workflow reported the same way (``temporal_floor``'s ``empty``, measured right
after: the ceiling, and on a machine shared with others the measure of its load; ``vs_empty``
is their ratio), the history events of a
recovery (mean over all, and by type for one), the CPU seconds per recovery of the dev
server and of this process (worker, reports, in-memory scheduler): on 2 cores their sum
bounds the throughput; what the worker asked per recovery of Temporal (RPCs by kind, its
own client: not the reports) and of the scheduler (calls, and rows its list reads returned);
the figures not read in time (``records not read`` notes) and the activities cancelled; and
when the recoveries had closed (``closed_by_s``: seconds from the first report until half, 90 %,
99 % and all of them had), which tells a slow tail from a slow whole; and how fast the machine
ran Python before and after (``machine``: a fixed loop's CPU seconds, ``_common.machine_loop_s``),
which tells a slow machine from slow code: on a shared machine the same tree's rate moves with
it, by as much as a fifth between runs minutes apart.

    python benchmarks/burst.py [--jobs 200] [--levers] [--lever NAME] [--skip-baseline] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import benchmark_parser, machine_loop_s, print_result
from support.burst_processes import next_line, spawn_worker
from support.node_loss import SOURCES, lost_node_cluster, node_loss_reports
from support.shared_scheduler import serving
from temporal_floor import measure as measure_floor
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from resurrect.config import ResurrectConfig, TemporalSettings
from resurrect.contracts import Interruption
from resurrect.contracts.workflow_names import RECOVERY_WORKFLOW, REPORT_SIGNAL
from resurrect.goodput.advice_note import PREFIX as ADVICE_PREFIX
from resurrect.lemons import records as lemon_records
from resurrect.sensors.report import report_interruption
from resurrect.temporal import search_attributes as sa
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal, free_port
from resurrect.testing import FakeScheduler
from resurrect.testing.counting import (
    RPC_KINDS,
    CallCounts,
    count_scheduler_calls,
    count_temporal_calls,
    counted,
)
from resurrect.workers.recovery_worker import (
    build_operator_workers,
    build_worker,
    read_kept_figures,
    workflow_classes,
)

WAL = ("journal_mode=wal", "synchronous=normal")
EAGER = ("system.enableActivityEagerExecution=true",)


@dataclass(frozen=True)
class Variant:
    lean_reports: bool = True
    sandboxed: bool | None = None  # None: temporal.workflow_sandbox (on by default)
    dynamic_config: tuple[str, ...] = ()
    max_cached_workflows: int = 1000
    processes: int = 0  # worker processes sharing the cluster over a socket; 0: in this one
    max_concurrent_workflow_tasks: int | None = None
    shared_queue: bool = False  # budget and repair workflows on the recoveries' task queue
    repair: bool = True  # False: no node-repair workflows (what they cost; not a setting to use)


BASELINE = Variant(lean_reports=False, shared_queue=True)
LEAN = Variant()
LEVERS = {
    "signal_reports": Variant(lean_reports=False),
    "unsandboxed": Variant(sandboxed=False),
    "eager": Variant(dynamic_config=EAGER),
    "cache4k": Variant(max_cached_workflows=4000),
    "processes1": Variant(processes=1),
    "processes2": Variant(processes=2),
    "wft500": Variant(max_concurrent_workflow_tasks=500),
    "no_repair": Variant(repair=False),
    "shared_queue": Variant(shared_queue=True),
}


async def signal_report(client: Client, interruption: Interruption, *, task_queue: str) -> str:
    """A signal-with-start for every report, evidence or not."""
    await client.start_workflow(
        RECOVERY_WORKFLOW,
        interruption,
        id=interruption.workflow_id,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        start_signal=REPORT_SIGNAL,
        start_signal_args=[interruption],
        search_attributes=sa.initial_attributes(interruption),
    )
    return interruption.workflow_id


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its waited-for children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks


def _config(state: Path, variant: Variant) -> ResurrectConfig:
    queue = f"burst-{uuid.uuid4().hex}"
    return ResurrectConfig.model_validate(
        {
            "mode": "act",
            "cluster": {"name": f"burst{uuid.uuid4().hex[:6]}"},
            "temporal": {
                "task_queue": queue,
                # None: the default, a task queue (and worker) of their own
                "operator_task_queue": queue if variant.shared_queue else None,
                "state_dir": str(state),
            },
            "isolation": {"max_drain_fraction": 1.0},
            "recovery": {"wait_running_timeout_s": 120, "activity_timeout_s": 60},
            "repair": {"enabled": variant.repair},
        }
    )


@contextlib.asynccontextmanager
async def workers(
    variant: Variant,
    client: Client,
    config: ResurrectConfig,
    scheduler: FakeScheduler,
    server: EmbeddedTemporal,
) -> AsyncIterator[Callable[[], float]]:
    """The variant's workers, running; yields what reads their CPU seconds so far (beside
    this process's own: the reports, and the in-memory scheduler)."""
    if variant.processes:
        state = server.state_dir
        socket, config_path = state / "scheduler.sock", state / "config.json"
        config_path.write_text(config.model_dump_json())
        async with serving(scheduler, socket):
            started = [
                spawn_worker(server.address, config_path, socket, log)
                for log in (state / f"worker{i}.log" for i in range(variant.processes))
            ]
            try:
                for process in started:
                    assert await next_line(process, timeout_s=60) == "ready"
                yield lambda: sum(process_cpu_s(p.pid) for p in started)
            finally:
                for process in started:
                    process.terminate()
                    process.wait(timeout=30)
        return
    worker = build_worker(
        client,
        config,
        scheduler,
        workflows=workflow_classes(),
        sandboxed=variant.sandboxed,
        max_cached_workflows=variant.max_cached_workflows,
        max_concurrent_workflow_tasks=variant.max_concurrent_workflow_tasks,
    )
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(worker)
        for operator in build_operator_workers(client, config, scheduler):
            await stack.enter_async_context(operator)
        # as a running worker has them (read once as it starts): not the burst's cost
        await read_kept_figures(client, config, scheduler)
        yield lambda: 0.0  # the workers are this process


class Tally(logging.Filter):
    """Counts the worker's notes of figures not read in time (a recovery going on without
    them) and of activities completed as cancelled; lets every other record through."""

    LOGGERS = ("temporalio.activity", "resurrect.activities.recovery", "activities.recovery")

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "not read (recovering without them)" in message:
            self.counts["records_not_read"] += 1
        if message.startswith("Completing as cancelled"):
            activity = getattr(record, "temporal_activity", {}) or {}
            self.counts[f"cancelled {activity.get('activity_type', 'activity')}"] += 1
        return record.levelno >= logging.WARNING

    @contextlib.contextmanager
    def installed(self) -> Iterator[Counter[str]]:
        loggers = [logging.getLogger(name) for name in self.LOGGERS]
        levels = [logger.level for logger in loggers]
        for logger in loggers:
            logger.addFilter(self)
            logger.setLevel(logging.DEBUG)
        try:
            yield self.counts
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.removeFilter(self)
                logger.setLevel(level)


ADVICE_MISSING = (f"{ADVICE_PREFIX}not computed", f"{ADVICE_PREFIX}unavailable")
CANCELLED_EVENTS = ("ACTIVITY_TASK_CANCEL_REQUESTED", "ACTIVITY_TASK_TIMED_OUT")
# A report the server refuses as overloaded (RESOURCE_EXHAUSTED: "workflow is busy") or that
# timed out (the client's deadline, as thousands of reports start at once on a loaded
# machine) is sent again after this pause, as the Slurm watcher sends an unreported
# interruption again at its next poll (``watcher.poll_interval_s``); the retries are counted.
REPORT_RETRY_PAUSE_S = 2.0
REPORT_TRIES = 30
REPORT_AGAIN = frozenset(
    {RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED}
)


@dataclass
class ReportRetries:
    count: int = 0

    def sending(self, report: Callable[..., Any]) -> Callable[..., Any]:
        async def send(client: Client, interruption: Interruption, *, task_queue: str) -> str:
            for _ in range(REPORT_TRIES - 1):
                try:
                    return str(await report(client, interruption, task_queue=task_queue))
                except RPCError as exc:
                    if exc.status not in REPORT_AGAIN:
                        raise
                    self.count += 1
                    await asyncio.sleep(REPORT_RETRY_PAUSE_S)
            return str(await report(client, interruption, task_queue=task_queue))

        return send


async def burst(jobs: int, variant: Variant, state: Path) -> dict[str, Any]:
    """One variant's burst, with how fast the machine ran Python just before and just after
    (``machine_loop_s``, with no server or worker running: their threads would slow it)."""
    before = machine_loop_s()
    measured = await _burst(jobs, variant, state)
    # the CPU per recovery and the rate move with it, the code unchanged
    measured["machine"] = {"loop_s_before": before, "loop_s_after": machine_loop_s()}
    return measured


async def _burst(jobs: int, variant: Variant, state: Path) -> dict[str, Any]:
    server = EmbeddedTemporal(
        state_dir=state,
        port=free_port(),
        ui_port=None,
        sqlite_pragmas=WAL,
        dynamic_config=variant.dynamic_config,
    )
    server.start()
    try:
        client: Client = await connect(TemporalSettings(), address=server.address, attempts=20)
        config = _config(state, variant)
        scheduler = lost_node_cluster(jobs, config.cluster.name)
        batch = [r for source in SOURCES for r in node_loss_reports(scheduler, source)]
        retries = ReportRetries()
        report = retries.sending(report_interruption if variant.lean_reports else signal_report)
        # the workers' own client, counted (the reports and the waits for results are not
        # the recoveries' cost); worker processes (--lever processes*) are not counted
        worker_client = await connect(TemporalSettings(), address=server.address, attempts=20)
        temporal_calls = count_temporal_calls(worker_client)
        scheduler_calls = count_scheduler_calls(scheduler)
        scores = CallCounts()  # the lemon scores the worker computes
        unscored = lemon_records.lemon_score
        lemon_records.lemon_score = counted("lemon_score", unscored, scores)
        tally = Tally()
        async with workers(variant, worker_client, config, scheduler, server) as worker_cpu_s:
            temporal_calls.clear()
            scheduler_calls.clear()
            scores.clear()
            assert server.process is not None
            cpu0, own0 = process_cpu_s(server.process.pid), time.process_time() + worker_cpu_s()
            started, started_wall = time.monotonic(), time.time()
            queue = config.temporal.task_queue
            with tally.installed() as notes:
                ids = await asyncio.gather(*(report(client, r, task_queue=queue) for r in batch))
                unique = sorted(set(ids))
                outcomes = await asyncio.gather(
                    *(client.get_workflow_handle(i).result() for i in unique)
                )
            seconds = time.monotonic() - started
            cpu = process_cpu_s(server.process.pid) - cpu0
            own = time.process_time() + worker_cpu_s() - own0
            lemon_records.lemon_score = unscored
            temporal_each = temporal_calls.per(len(unique), RPC_KINDS)
            temporal_bytes = {k: v for k, v in temporal_each.items() if k.endswith(" bytes")}
            temporal_each = {k: v for k, v in temporal_each.items() if k not in temporal_bytes}
            scheduler_each = scheduler_calls.per(len(unique))
            histories = [await client.get_workflow_handle(i).fetch_history() for i in unique]
            events = [len(h.events) for h in histories]
            # when the recoveries closed, from the first report (the server's event times)
            closed = sorted(h.events[-1].event_time.ToMicroseconds() / 1e6 for h in histories)
            closed_by = {
                name: round(
                    closed[min(len(closed) - 1, int(share * len(closed)))] - started_wall, 2
                )
                for name, share in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("last", 1.0))
            }
            every_kind = Counter(
                EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
                for h in histories
                for e in h.events
            )
            # what the recoveries carry: each event's serialized size, by type
            bytes_by_kind: Counter[str] = Counter()
            for h in histories:
                for e in h.events:
                    kind = EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
                    bytes_by_kind[kind] += e.ByteSize()
            # the same server's ceiling, measured right after: an empty workflow reported the
            # same way (what a recovery cannot beat; on a shared machine, the load's measure)
            empty = await measure_floor(
                client, server.process.pid, jobs, 0, local=True, sandboxed=False
            )
        requeues = Counter(j for op, j in scheduler.calls if op == "requeuehold")
        drains = Counter(n for op, n in scheduler.calls if op == "drain")
        return {
            "recoveries": len(unique),
            "seconds": round(seconds, 2),
            "recoveries_per_s": round(len(unique) / seconds, 2),
            "empty_workflows_per_s": empty["workflows_per_s"],
            "vs_empty": round(len(unique) / seconds / empty["workflows_per_s"], 3),
            "events_per_recovery": round(statistics.mean(events), 1),
            # seconds from the first report until that share of the recoveries had closed: a
            # tail far behind p99 bounds the rate as much as the cost per recovery does
            "closed_by_s": closed_by,
            # per recovery, over every history of the burst (the first alone is no sample:
            # it starts while the rest of the burst arrives)
            "events_by_type": {
                k: round(n / len(histories), 2) for k, n in every_kind.most_common()
            },
            "history_bytes_per_recovery": round(sum(bytes_by_kind.values()) / len(histories)),
            "history_bytes_by_type": {
                k: round(n / len(histories)) for k, n in bytes_by_kind.most_common()
            },
            "server_cpu_s_per_recovery": round(cpu / len(unique), 4),
            # the workers, the three sensors' reports, the in-memory scheduler
            "worker_cpu_s_per_recovery": round(own / len(unique), 4),
            "requeued_exactly_once": len(requeues) == jobs
            and all(count == 1 for count in requeues.values()),
            "drained_twice": sum(1 for count in drains.values() if count > 1),
            "reports_retried": retries.count,
            "records_not_read": notes["records_not_read"],
            # recoveries whose checkpoint advice note says its figures were not had in time
            "advice_not_computed": sum(
                any(n.startswith(ADVICE_MISSING) for n in outcome.get("notes", []))
                for outcome in outcomes
            ),
            "cancelled_activities": {k: v for k, v in notes.items() if k.startswith("cancelled")},
            "cancelled_activity_events": sum(every_kind[k] for k in CANCELLED_EVENTS),
            # what each recovery asked of Temporal (by kind) and of the scheduler (by call)
            "temporal_calls_per_recovery": _rounded(temporal_each),
            # the bytes of those calls' requests, by kind
            "temporal_bytes_per_recovery": _rounded(temporal_bytes),
            # lemon scores computed (one per node scored)
            "lemon_scores_per_recovery": round(scores.calls["lemon_score"] / len(unique), 2),
            "scheduler_calls_per_recovery": _rounded(scheduler_each),
        }
    finally:
        server.stop()


def _rounded(figures: dict[str, float]) -> dict[str, float]:
    return {name: round(value, 2) for name, value in sorted(figures.items())}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    variants = {"baseline": BASELINE, "lean": LEAN}
    if args.skip_baseline:  # exploring levers: ratios against lean only
        variants = {"lean": LEAN}
    if args.levers:
        variants.update(LEVERS)
    for name in args.lever or []:
        variants[name] = LEVERS[name]
    measured: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="burst-") as tmp:
        for name, variant in variants.items():
            measured[name] = await burst(args.jobs, variant, Path(tmp) / name)
    lean, base = measured["lean"], measured.get("baseline", measured["lean"])
    return {
        "benchmark": "burst",
        "jobs": args.jobs,
        "reports_each": len(SOURCES),
        **{k: v for k, v in lean.items() if k != "events_by_type"},
        "speedup_vs_baseline": round(lean["recoveries_per_s"] / base["recoveries_per_s"], 2),
        "baseline_recoveries_per_s": base["recoveries_per_s"],
        "baseline_events_per_recovery": base["events_per_recovery"],
        "events_by_type": lean["events_by_type"],
        "baseline_events_by_type": base["events_by_type"],
        "variants": {
            name: {k: v for k, v in result.items() if k != "events_by_type"}
            for name, result in measured.items()
        },
        "sqlite_pragmas": list(WAL),
        "targets": {"recoveries_per_s": 30},
    }


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 writes to stderr while the block runs."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument(
        "--levers", action="store_true", help="also measure each lever alone (slower)"
    )
    parser.add_argument(
        "--lever", action="append", choices=sorted(LEVERS), help="also measure this lever"
    )
    parser.add_argument(
        "--skip-baseline", action="store_true", help="measure lean and the levers only"
    )
    args = parser.parse_args(argv)
    with stdout_to_stderr():  # Temporal's core may log on stdout: keep it for the JSON line
        result = asyncio.run(run(args))
    print_result(result, as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
