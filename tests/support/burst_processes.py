"""Worker and sensor processes for scale-out tests and benchmarks: several of each on one
task queue against one Temporal server and one shared in-memory cluster
(:mod:`support.shared_scheduler`), so that one can be killed mid-burst.

    python -m support.burst_processes worker --address HOST:PORT \\
        --config CONFIG.json --scheduler SOCKET
    python -m support.burst_processes report --address HOST:PORT \\
        --task-queue QUEUE --reports REPORTS.jsonl [--pause-s 0.01]

``worker`` prints ``ready`` once it polls and runs until SIGTERM; ``report`` reports each
interruption of the JSON-lines file in turn (as one sensor would, ``pause-s`` apart) and
prints ``reported <workflow id>`` for each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from resurrect.config import ResurrectConfig, TemporalSettings
from resurrect.contracts import Interruption
from resurrect.sensors.report import report_interruption
from resurrect.temporal.client import connect
from resurrect.workers.recovery_worker import build_operator_workers, build_worker, run_worker
from support.shared_scheduler import RemoteScheduler


def spawn(command: str, log: Path, *args: str) -> subprocess.Popen[str]:
    """Start ``command`` (``worker`` or ``report``) in a new process of this interpreter,
    its stderr in ``log``, its stdout readable with :func:`next_line`."""
    with open(log, "w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "support.burst_processes", command, *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )


def spawn_worker(address: str, config: Path, scheduler: Path, log: Path) -> subprocess.Popen[str]:
    """A worker process (see the module's doc); wait for it with :func:`next_line`."""
    return spawn(
        "worker", log, "--address", address, "--config", str(config), "--scheduler", str(scheduler)
    )


async def next_line(process: subprocess.Popen[str], timeout_s: float = 120) -> str:
    """The next line ``process`` prints (``ready``, ``reported <id>``): a bound, not a wait
    (three processes importing resurrect at once on 2 busy cores took over 30 s)."""
    assert process.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), timeout_s)
    return line.strip()


async def work(address: str, config_path: Path, scheduler_path: Path) -> None:
    config = ResurrectConfig.model_validate_json(config_path.read_text())
    client = await connect(TemporalSettings(), address=address, attempts=20)
    scheduler = RemoteScheduler(scheduler_path, config.cluster.name)
    worker = build_worker(client, config, scheduler, graceful_shutdown_s=2.0)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    running = [asyncio.create_task(run_worker(worker, stop))]
    # the budget and repair workflows on their own task queues
    for operator in build_operator_workers(client, config, scheduler, graceful_shutdown_s=2.0):
        running.append(asyncio.create_task(run_worker(operator, stop)))
    await asyncio.sleep(0.5)  # the pollers are up
    print("ready", flush=True)
    await asyncio.gather(*running)


async def report(address: str, task_queue: str, reports: Path, pause_s: float) -> None:
    client = await connect(TemporalSettings(), address=address, attempts=20)
    for line in reports.read_text().splitlines():
        interruption = Interruption.model_validate_json(line)
        workflow_id = await report_interruption(client, interruption, task_queue=task_queue)
        print("reported", workflow_id, flush=True)
        await asyncio.sleep(pause_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker")
    worker.add_argument("--address", required=True)
    worker.add_argument("--config", type=Path, required=True)
    worker.add_argument("--scheduler", type=Path, required=True)
    reporter = commands.add_parser("report")
    reporter.add_argument("--address", required=True)
    reporter.add_argument("--task-queue", required=True)
    reporter.add_argument("--reports", type=Path, required=True)
    reporter.add_argument("--pause-s", type=float, default=0.01)
    args = parser.parse_args(argv)
    if args.command == "worker":
        asyncio.run(work(args.address, args.config, args.scheduler))
    else:
        asyncio.run(report(args.address, args.task_queue, args.reports, args.pause_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
