"""What the embedded Temporal dev server and the Python SDK can do on this machine at most:
the ceiling any recovery burst runs under.

``--jobs`` workflows are each started by three signal-with-starts (like a recovery reported
by three sensors), wait for the first signal, run ``--steps`` trivial activities and end.
Measured in the same run, on one dev server (SQLite WAL, as resurrect starts it), one
worker process:

* ``empty``: no activity (the cost of starting, signalling and closing a workflow);
* ``local``: the steps as local activities (markers in the workflow's own task);
* ``tasks``: the steps as activity tasks (three history events and a task round trip each);
* ``tasks_sandboxed``: the same in the SDK's workflow sandbox, which resurrect's worker runs
  its workflows in (every module but this one passed through, as resurrect's worker does).

For each: workflows per second, the dev server's and this process' CPU milliseconds per
workflow, and the history events of one. Compare ``benchmarks/burst.py``'s recoveries per
second with these: a recovery cannot be faster than a workflow of its shape.

    python benchmarks/temporal_floor.py [--jobs 300] [--steps 5] [--json]
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import benchmark_parser, print_result
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from resurrect.temporal.server import EmbeddedTemporal, free_port

WAL = ("journal_mode=wal", "synchronous=normal")
REPORTS_EACH = 3


@activity.defn
async def step(value: int) -> int:
    return value + 1


@workflow.defn
class Floor:
    def __init__(self) -> None:
        self.reports = 0

    @workflow.signal
    def report(self, source: int) -> None:
        self.reports += 1

    @workflow.run
    async def run(self, steps: int, local: bool) -> int:
        await workflow.wait_condition(lambda: self.reports > 0)
        value = 0
        timeout = timedelta(seconds=30)
        for _ in range(steps):
            if local:
                value = await workflow.execute_local_activity(
                    step, value, start_to_close_timeout=timeout
                )
            else:
                value = await workflow.execute_activity(step, value, start_to_close_timeout=timeout)
        return value


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    client: Client, server_pid: int, jobs: int, steps: int, *, local: bool, sandboxed: bool
) -> dict[str, Any]:
    queue = f"floor-{time.monotonic_ns()}"
    passthrough = SandboxRestrictions.default.with_passthrough_modules("resurrect", "_common")
    runner = (
        SandboxedWorkflowRunner(restrictions=passthrough)
        if sandboxed
        else UnsandboxedWorkflowRunner()
    )
    async with Worker(
        client,
        task_queue=queue,
        workflows=[Floor],
        activities=[step],
        max_concurrent_workflow_tasks=100,
        max_concurrent_activities=100,
        workflow_runner=runner,
    ):
        server0, own0, started = cpu_s(server_pid), time.process_time(), time.monotonic()
        admitted = asyncio.Semaphore(200)

        async def reported(index: int) -> None:
            async with admitted:
                for source in range(REPORTS_EACH):
                    await client.start_workflow(
                        Floor.run,
                        args=[steps, local],
                        id=f"{queue}-{index}",
                        task_queue=queue,
                        start_signal="report",
                        start_signal_args=[source],
                    )

        await asyncio.gather(*(reported(i) for i in range(jobs)))
        await asyncio.gather(
            *(client.get_workflow_handle(f"{queue}-{i}").result() for i in range(jobs))
        )
        wall = time.monotonic() - started
        server, own = cpu_s(server_pid) - server0, time.process_time() - own0
    history = await client.get_workflow_handle(f"{queue}-0").fetch_history()
    return {
        "workflows_per_s": round(jobs / wall, 1),
        "server_cpu_ms": round(1000 * server / jobs, 1),
        "worker_cpu_ms": round(1000 * own / jobs, 1),
        "events": len(history.events),
    }


async def run(jobs: int, steps: int) -> dict[str, Any]:
    server = EmbeddedTemporal(
        state_dir=Path(tempfile.mkdtemp(prefix="resurrect-floor-")),
        port=free_port(),
        ui_port=None,
        sqlite_pragmas=WAL,
    )
    server.start()
    try:
        assert server.process is not None
        client = await Client.connect(server.address)
        pid = server.process.pid
        variants = {
            "empty": await measure(client, pid, jobs, 0, local=True, sandboxed=False),
            "local": await measure(client, pid, jobs, steps, local=True, sandboxed=False),
            "tasks": await measure(client, pid, jobs, steps, local=False, sandboxed=False),
            "tasks_sandboxed": await measure(client, pid, jobs, steps, local=False, sandboxed=True),
        }
    finally:
        server.stop()
    return {
        "jobs": jobs,
        "reports_each": REPORTS_EACH,
        "steps": steps,
        "cpus": os.cpu_count(),
        **{f"{name}_{k}": v for name, got in variants.items() for k, v in got.items()},
        "sandbox_slowdown": round(
            variants["tasks"]["workflows_per_s"] / variants["tasks_sandboxed"]["workflows_per_s"],
            2,
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    print_result(asyncio.run(run(args.jobs, args.steps)), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
