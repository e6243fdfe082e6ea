"""Slurm watcher cost per poll at fleet scale: CPU and bytes read from Slurm, against the
naive full JSON reads (``squeue --json`` + ``sinfo --json``) measured in the same run.

Two sources:

* generated (default): ``--jobs`` (50,000) jobs on ``--nodes`` (10,000) nodes, of which
  ``--running`` are running (``--nodes-per-job`` nodes each), a few just failed and the rest
  held in the queue; a few nodes down. Slurm's output for every query the watcher makes is
  rendered once beforehand (:mod:`support.slurm_text`, the same text squeue/sinfo
  print), so the CPU counted is the watcher's alone: reading, parsing and deciding.
* ``--slurm-conf PATH``: a real (local) cluster, as it is (fill its queue with held jobs
  first, see deploy/local-slurm ``--max-jobs``); the CPU of the Slurm client processes is
  reported separately (``client_cpu_ms_per_poll``), as is their wall time.

A poll is :meth:`sensors.slurm_watcher.SlurmWatcher.poll_once` (the watcher's first poll,
which reads owner fields of every running job once, is excluded from the steady state and
reported as ``first_poll_*``). The naive poll is the former one: ``list_jobs`` +
``list_nodes`` (full JSON) and the same detection.

    python benchmarks/watcher_cost.py [--jobs 50000] [--nodes 10000] [--polls 10] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from collections.abc import Sequence
from typing import Any

from _common import benchmark_parser, print_result
from support.slurm_text import SlurmText

from resurrect.config import ResurrectConfig
from resurrect.contracts import Interruption
from resurrect.scheduler.slurm_cli import SlurmCli
from resurrect.scheduler.slurm_exec import CommandResult, CommandRunner
from resurrect.sensors.slurm_watcher import SlurmWatcher

OPT_IN = '{"resurrect": {"max_restarts": 3}}'


def generate(
    jobs: int, nodes: int, running: int, per_job: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    node_docs: list[dict[str, Any]] = []
    for index in range(nodes):
        state, flags = ("allocated", []) if index < running * per_job else ("idle", [])
        if index % 2000 == 1999:
            state, flags = "down", ["NOT_RESPONDING"]
        node_docs.append(
            {
                "name": f"gpu{index + 1:05d}",
                "state": state,
                "state_flags": flags,
                "reason": "Not responding" if state == "down" else "",
                "partitions": ["gpu"],
            }
        )
    job_docs: list[dict[str, Any]] = []
    for index in range(jobs):
        job_id = 100000 + index
        base: dict[str, Any] = {
            "job_id": job_id,
            "name": f"train-{index}",
            "user_name": "alice",
            "user_id": 1001,
            "group_id": 1001,
            "partition": "gpu",
            "comment": OPT_IN if index % 2 == 0 else "",
            "standard_output": "/home/alice/logs/%x-%j.out",
            "current_working_directory": "/home/alice",
            "restart_cnt": 0,
            "requeue": True,
            "batch_flag": True,
            "submit_time": 1795980000,
        }
        if index < running:
            first = index * per_job
            base.update(
                job_state="RUNNING",
                nodes=",".join(f"gpu{n + 1:05d}" for n in range(first, first + per_job)),
                node_count=per_job,
                priority=1000,
                start_time=1795981000,
            )
        elif index < running + 20:
            base.update(
                job_state="FAILED",
                nodes="gpu09990",
                node_count=1,
                priority=1000,
                exit_code=1 << 8,
                start_time=1795981000,
                end_time=1795981100,
            )
        else:
            base.update(
                job_state="PENDING",
                nodes="",
                node_count=per_job,
                priority=0,
                state_reason="JobHeldUser",
            )
        job_docs.append(base)
    return job_docs, node_docs


class RenderedRunner(CommandRunner):
    """Answers each argv with Slurm's text for it, rendered once and then remembered, and
    counts the bytes handed to the watcher."""

    def __init__(self, slurm: SlurmText) -> None:
        super().__init__()
        self.slurm = slurm
        self.cache: dict[tuple[str, ...], CommandResult] = {}
        self.bytes = 0

    def prepare(self, argv: Sequence[str]) -> CommandResult:
        key = tuple(argv)
        if key not in self.cache:
            if key == ("scontrol", "--version"):
                self.cache[key] = CommandResult(key, 0, "slurm 22.05.8\n", "")
            else:
                answer = self.slurm.answer(key)
                assert answer is not None, key
                self.cache[key] = CommandResult(key, *answer)
        return self.cache[key]

    async def run(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        result = self.prepare(argv)
        self.bytes += len(result.stdout.encode())
        return result


class CountingRunner(CommandRunner):
    """The real runner, counting bytes read from the Slurm clients."""

    bytes = 0

    async def run(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        result = await super().run(argv, timeout=timeout)
        self.bytes += len(result.stdout.encode()) + len(result.stderr.encode())
        return result


class NaiveView(SlurmCli):
    """The former watcher reads: every job and node as full JSON."""

    async def list_active_jobs(self, also: Any = ()) -> Any:  # type: ignore[override]
        return await self.list_jobs()

    async def list_unhealthy_nodes(self) -> Any:  # type: ignore[override]
        return await self.list_nodes()


async def _nothing(_: Interruption) -> None:
    return None


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def measure(sched: SlurmCli, polls: int) -> dict[str, float]:
    config = ResurrectConfig.model_validate({"cluster": {"name": "bench"}})
    watcher = SlurmWatcher(sched, config, _nothing)
    runner = sched.runner
    assert isinstance(runner, RenderedRunner | CountingRunner)
    cpu0, kids0, wall0, bytes0 = time.process_time(), children_cpu(), time.perf_counter(), 0
    runner.bytes = 0
    await watcher.poll_once()
    first = {
        "first_poll_cpu_ms": (time.process_time() - cpu0) * 1000,
        "first_poll_bytes": float(runner.bytes),
    }
    bytes0 = runner.bytes
    cpu0, kids0, wall0 = time.process_time(), children_cpu(), time.perf_counter()
    for _ in range(polls):
        await watcher.poll_once()
    return {
        **first,
        "cpu_ms": (time.process_time() - cpu0) * 1000 / polls,
        "client_cpu_ms": (children_cpu() - kids0) * 1000 / polls,
        "wall_ms": (time.perf_counter() - wall0) * 1000 / polls,
        "bytes": (runner.bytes - bytes0) / polls,
        "active_jobs": float(len(watcher._last_jobs)),
    }


def generated_cli(cls: type[SlurmCli], runner: RenderedRunner) -> SlurmCli:
    sched = cls("bench")
    sched.runner = runner
    return sched


async def count_lines(sched: SlurmCli, argv: list[str]) -> int:
    return len((await sched.runner.check(argv)).stdout.split())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    lean: SlurmCli
    naive: SlurmCli
    if args.slurm_conf:
        lean, naive = SlurmCli("bench", args.slurm_conf), NaiveView("bench", args.slurm_conf)
        for sched in (lean, naive):
            sched.runner = CountingRunner(slurm_conf=args.slurm_conf)
        source = "local-slurm"
        total_jobs = await count_lines(lean, ["squeue", "-h", "-r", "-o", "%i"])
        total_nodes = await count_lines(lean, ["sinfo", "-h", "-N", "-o", "%N"])
    else:
        jobs, nodes = generate(args.jobs, args.nodes, args.running, args.nodes_per_job)
        runner = RenderedRunner(SlurmText(jobs, nodes))
        # Slurm's side: render the text of every query before measuring the watcher
        for argv in (["squeue", "--json"], ["sinfo", "--json"]):
            runner.prepare(argv)
        await measure(generated_cli(SlurmCli, runner), 1)
        lean, naive = generated_cli(SlurmCli, runner), generated_cli(NaiveView, runner)
        source, total_jobs, total_nodes = "generated", args.jobs, args.nodes
    after = await measure(lean, args.polls)
    before = await measure(naive, max(1, args.naive_polls))
    return {
        "benchmark": "watcher_cost",
        "source": source,
        "jobs": total_jobs,
        "nodes": total_nodes,
        "running_jobs": args.running if source == "generated" else None,
        "polls": args.polls,
        "cpu_ms_per_poll": round(after["cpu_ms"], 2),
        "bytes_per_poll": round(after["bytes"]),
        "client_cpu_ms_per_poll": round(after["client_cpu_ms"], 2),
        "wall_ms_per_poll": round(after["wall_ms"], 2),
        "first_poll_cpu_ms": round(after["first_poll_cpu_ms"], 1),
        "first_poll_bytes": round(after["first_poll_bytes"]),
        "naive_cpu_ms_per_poll": round(before["cpu_ms"], 1),
        "naive_bytes_per_poll": round(before["bytes"]),
        "naive_client_cpu_ms_per_poll": round(before["client_cpu_ms"], 1),
        "naive_wall_ms_per_poll": round(before["wall_ms"], 1),
        "cpu_ratio": round(before["cpu_ms"] / max(after["cpu_ms"], 1e-6), 1),
        "bytes_ratio": round(before["bytes"] / max(after["bytes"], 1), 1),
        "targets": {"cpu_ms_per_poll": 50, "bytes_per_poll": 1_000_000},
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=2_000, help="running jobs (generated)")
    parser.add_argument("--nodes-per-job", type=int, default=4)
    parser.add_argument("--polls", type=int, default=10)
    parser.add_argument("--naive-polls", type=int, default=2)
    parser.add_argument("--slurm-conf", help="measure this (local) cluster instead")
    args = parser.parse_args(argv)
    print_result(asyncio.run(run(args)), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
