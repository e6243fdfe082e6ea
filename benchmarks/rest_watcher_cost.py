"""slurmrestd watcher cost per poll at two queue sizes: bytes and time, against the full-read
default view (``GET jobs/`` + ``GET nodes/``) measured in the same run.

A synthetic slurmrestd (:mod:`support.slurm_rest_synthetic`: Slurm 26.05's recorded job and
node as templates, data parser v0.0.45) behind an httpx MockTransport serves ``--small``
and then ``--large`` jobs, of which ``--running`` run (one node each) and 3 just failed; the
rest are held in the queue; ``--nodes`` nodes, a few down, one drained. Answers are rendered
before the measured polls, so the time is the backend's and the watcher's: reading, parsing,
deciding. A poll is :meth:`sensors.slurm_watcher.SlurmWatcher.poll_once` (the first poll is
left out of the steady state). The full-read view is :class:`~resurrect.scheduler.base.
SchedulerBase`'s over the same backend.

``bytes_growth`` is bytes per poll at ``--large`` over bytes per poll at ``--small`` while the
queue grows ``queue_growth`` times: only the states list (``jobs/state/``, ~80 B a job) grows
with the queue; the full reads grow ~9.7 KB a job (``full_bytes_growth``).

    python benchmarks/rest_watcher_cost.py [--small 1000] [--large 20000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from _common import benchmark_parser, print_result
from support.slurm_rest_synthetic import SyntheticRestd

from resurrect.config import ResurrectConfig
from resurrect.contracts import Interruption, JobInfo, NodeInfo
from resurrect.scheduler.base import SchedulerBase
from resurrect.scheduler.slurm_rest import SlurmRest
from resurrect.scheduler.slurm_rest_client import RestClient
from resurrect.sensors.slurm_watcher import SlurmWatcher


class FullReadView(SlurmRest):
    """The REST backend with the default view: every job and node read each poll."""

    async def list_active_jobs(self, also: Collection[str] = ()) -> list[JobInfo]:
        return await SchedulerBase.list_active_jobs(self, also)

    async def list_unhealthy_nodes(self) -> list[NodeInfo]:
        return await SchedulerBase.list_unhealthy_nodes(self)


async def _nothing(_: Interruption) -> None:
    return None


async def measure(
    cls: type[SlurmRest], restd: SyntheticRestd, token: Path, polls: int
) -> dict[str, float]:
    client = RestClient("http://127.0.0.1", token, transport=restd.transport())
    sched = cls("bench", client)
    config = ResurrectConfig.model_validate({"cluster": {"name": "bench"}})
    watcher = SlurmWatcher(sched, config, _nothing)
    await watcher.poll_once()  # data parser, first node read, owner data
    bytes0, requests0 = restd.bytes, sum(restd.requests.values())
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(polls):
        await watcher.poll_once()
    result = {
        "bytes": (restd.bytes - bytes0) / polls,
        "requests": (sum(restd.requests.values()) - requests0) / polls,
        "cpu_ms": (time.process_time() - cpu0) * 1000 / polls,
        "wall_ms": (time.perf_counter() - wall0) * 1000 / polls,
        "active_jobs": float(len(watcher._last_jobs)),
    }
    await client.aclose()
    return result


async def one_size(args: argparse.Namespace, jobs: int, token: Path) -> dict[str, Any]:
    restd = SyntheticRestd(jobs=jobs, running=args.running, nodes=args.nodes)
    view = await measure(SlurmRest, restd, token, args.polls)
    full = await measure(FullReadView, restd, token, args.full_polls)
    assert view["active_jobs"] == full["active_jobs"], (view, full)
    return {
        "jobs": jobs,
        "bytes_per_poll": round(view["bytes"]),
        "requests_per_poll": view["requests"],
        "cpu_ms_per_poll": round(view["cpu_ms"], 1),
        "wall_ms_per_poll": round(view["wall_ms"], 1),
        "full_bytes_per_poll": round(full["bytes"]),
        "full_cpu_ms_per_poll": round(full["cpu_ms"], 1),
        "full_wall_ms_per_poll": round(full["wall_ms"], 1),
        "bytes_ratio": round(full["bytes"] / max(view["bytes"], 1), 1),
        "wall_ratio": round(full["wall_ms"] / max(view["wall_ms"], 1e-6), 1),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        token = Path(tmp) / "token"
        token.write_text("header.payload.signature")
        token.chmod(0o600)
        small = await one_size(args, args.small, token)
        large = await one_size(args, args.large, token)
    return {
        "benchmark": "rest_watcher_cost",
        "source": "synthetic slurmrestd 26.05 (v0.0.45)",
        "nodes": args.nodes,
        "running_jobs": args.running,
        "polls": args.polls,
        "small": small,
        "large": large,
        "queue_growth": round(args.large / args.small, 1),
        "bytes_growth": round(large["bytes_per_poll"] / max(small["bytes_per_poll"], 1), 2),
        "wall_growth": round(large["wall_ms_per_poll"] / max(small["wall_ms_per_poll"], 1e-6), 2),
        "full_bytes_growth": round(
            large["full_bytes_per_poll"] / max(small["full_bytes_per_poll"], 1), 2
        ),
        "bytes_ratio": large["bytes_ratio"],
        "wall_ratio": large["wall_ratio"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--small", type=int, default=1_000, help="jobs, first queue")
    parser.add_argument("--large", type=int, default=20_000, help="jobs, second queue")
    parser.add_argument("--running", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--polls", type=int, default=10)
    parser.add_argument("--full-polls", type=int, default=2)
    args = parser.parse_args(argv)
    print_result(asyncio.run(run(args)), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
