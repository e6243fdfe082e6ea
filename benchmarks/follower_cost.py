"""Log-follower cost at 1,000 followed jobs: how fast a fatal line reaches a report for a
job that is printing, and how many file-system operations per second the follower makes,
against the former follower (every job's output opened, checked, read and closed every
0.25 s) measured in the same run.

``--jobs`` running opted-in jobs (1,000) each have an output file in a temporary
directory; ``--printing`` of them (60) print a line every 50 ms, the rest are quiet. Every
``--fatal-every`` seconds (0.15) another printing job prints a fatal GPU line (Xid 79), once
each, after ``--warmup`` seconds of printing; the time from its write to the follower's
report is one detection. The follower is the real
:class:`sensors.log_follower.JobLogFollower` with the real rule packs, run as the service
runs it. File-system operations are the follower's calls of ``open``, ``fstat``, ``stat``,
``lseek``, ``read``/``pread``, ``close``, ``scandir`` and ``listdir`` (counted by
wrapping them), per second.

Then floods: ``--flood-rounds`` rounds (4) in which three hostile jobs each append
``--flood-mib`` (0.25) MiB, one of bare newlines, one of one line repeated, one of distinct
short lines, while ``--flood-rounds`` good jobs print one fatal line each, one a round, just
before it; one round is one :meth:`JobLogFollower.poll_once` over all of them (hostile
jobs first). A round's wall time is how long a good job's fault waits behind the floods.
The baseline, in the same run, is the follower before per-job shares (every line of up to
4 MiB a look handed to Python, no CPU bound), reproduced here as ``FormerFollowedFile``.

    python benchmarks/follower_cost.py [--jobs 1000] [--duration 10] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import benchmark_parser, print_result

import resurrect.sensors.log_follower.followed_file as followed_file_module
import resurrect.sensors.log_follower.follower as follower_module
from resurrect.config import ResurrectConfig
from resurrect.contracts import Interruption, JobInfo, JobState
from resurrect.rules import load_engine
from resurrect.sensors.follower_share import DEFAULT_SHARE, UNBOUNDED_CPU, LookBudget
from resurrect.sensors.log_follower import FollowedFile, JobLogFollower
from resurrect.sensors.open_file_budget import OpenFileBudget
from resurrect.testing import FakeScheduler

FATAL = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
COUNTED = ("open", "fstat", "stat", "lstat", "lseek", "read", "pread", "close", "scandir")


class FsCounter:
    """Counts calls of the os functions the follower uses while ``on``."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.on = False
        self._real: dict[str, Any] = {}

    def install(self) -> None:
        for name in (*COUNTED, "listdir"):
            real = getattr(os, name)
            self._real[name] = real

            def counted(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                if self.on:
                    self.counts[_name] += 1
                return _real(*args, **kw)

            setattr(os, name, counted)

    def remove(self) -> None:
        for name, real in self._real.items():
            setattr(os, name, real)


async def measure(
    args: argparse.Namespace, root: Path, *, adaptive: bool, counter: FsCounter
) -> dict[str, float]:
    config = ResurrectConfig.model_validate(
        {
            "cluster": {"name": "bench"},
            "watcher": {"log_poll_interval_s": 0.05 if adaptive else 0.25},
        }
    )
    scheduler = FakeScheduler.with_nodes(2)
    files: list[Path] = []
    for index in range(args.jobs):
        path = root / f"{'a' if adaptive else 'n'}-{index}.out"
        path.write_bytes(b"[rank0] starting\n")
        files.append(path)
        job_id = str(1000 + index)
        scheduler.jobs[job_id] = JobInfo(
            job_id=job_id,
            state=JobState.RUNNING,
            nodes=["node1", "node2"],
            comment='{"resurrect": {}}',
            stdout_path=str(path),
            user_id=os.getuid(),
        )
    written: dict[str, float] = {}
    detections: list[float] = []
    follower: JobLogFollower

    async def report(interruption: Interruption) -> None:
        at = written.pop(interruption.job_id, None)
        if at is not None:
            detections.append(time.monotonic() - at)

    follower = JobLogFollower(scheduler, config, load_engine(), report, adaptive=adaptive)
    if not adaptive:  # the former follower opened and closed each file at every look
        followed_file_module.open_files = OpenFileBudget(limit=-1)
    stop = asyncio.Event()
    task = asyncio.create_task(follower.run(stop))
    await asyncio.sleep(2.0)  # first refresh; every file is looked at once
    printing = files[: args.printing]
    handles = [path.open("ab", buffering=0) for path in printing]
    warm_until = time.monotonic() + args.warmup  # the printing jobs are seen printing
    step = 0
    while time.monotonic() < warm_until:
        step += 1
        for handle in handles:
            handle.write(f"[rank0] warm-up step {step}\n".encode())
        await asyncio.sleep(0.05)
    started = time.monotonic()
    counter.counts.clear()
    counter.on = True
    next_fatal = started + args.fatal_every
    unreported = list(range(len(handles)))  # each printing job prints one fatal line
    while time.monotonic() - started < args.duration:
        step += 1
        fatal_to = None
        if time.monotonic() >= next_fatal and unreported:
            fatal_to = unreported.pop(0)
            next_fatal += args.fatal_every
        for index, handle in enumerate(handles):
            if index == fatal_to:
                written[str(1000 + index)] = time.monotonic()
                handle.write(FATAL)
            else:
                handle.write(f"[rank0] step {step} loss 1.{step % 97:02d}\n".encode())
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - started
    counter.on = False
    ops = sum(counter.counts.values())
    await asyncio.sleep(1.0)  # late detections
    stop.set()
    await task
    for handle in handles:
        handle.close()
    followed_file_module.open_files = OpenFileBudget()
    detections.sort()
    p95 = detections[int(0.95 * (len(detections) - 1))] if detections else float("nan")
    return {
        "fs_ops_per_s": ops / elapsed,
        "detect_p95_ms": p95 * 1000,
        "detect_p50_ms": statistics.median(detections) * 1000 if detections else float("nan"),
        "detections": float(len(detections)),
        "missed": float(len(written)),
        **{f"ops_{k}": v / elapsed for k, v in counter.counts.items()},
    }


class FormerFollowedFile(FollowedFile):
    """The followed file before per-job shares: every line of up to 4 MiB a look, blank or
    repeated, goes to Python, whatever it costs."""

    def lines(self, budget: LookBudget | None = None) -> Iterator[tuple[int | None, bytes]]:
        self.consumed = 0
        read = self._read(LookBudget(UNBOUNDED_CPU))
        if read is None:
            return
        start, data = read
        self.consumed, self.offset = len(data), start + len(data)
        pieces = (self.pending + data).split(b"\n")
        self.pending = pieces.pop()
        for piece in pieces:
            if self.line_number is not None:
                self.line_number += 1
            yield self.line_number, piece


def flood_chunks(mib: float) -> dict[str, bytes]:
    size = int(mib * (1 << 20))
    distinct = b"".join(b"%d\n" % n for n in range(size // 7 + 1))[:size]
    return {
        "newlines": b"\n" * size,
        "repeated": b"[rank0] loss 1.0000\n" * (size // 20),
        "distinct": distinct[: distinct.rfind(b"\n") + 1],
    }


async def measure_floods(args: argparse.Namespace, root: Path, *, former: bool) -> dict[str, float]:
    config = ResurrectConfig.model_validate({"cluster": {"name": "bench"}})
    scheduler = FakeScheduler.with_nodes(2)
    chunks = flood_chunks(args.flood_mib)
    names = [*chunks, *(f"good{n}" for n in range(args.flood_rounds))]
    paths: dict[str, Path] = {}
    for index, name in enumerate(names):
        paths[name] = root / f"{'f' if former else 's'}-{name}.out"
        paths[name].write_bytes(b"[rank0] starting\n")
        scheduler.jobs[str(index)] = JobInfo(
            job_id=str(index),
            state=JobState.RUNNING,
            nodes=["node1", "node2"],
            comment='{"resurrect": {}}',
            stdout_path=str(paths[name]),
            user_id=os.getuid(),
        )
    reported: list[str] = []

    async def report(interruption: Interruption) -> None:
        reported.append(interruption.job_id)

    share = UNBOUNDED_CPU if former else DEFAULT_SHARE
    real_file = follower_module.FollowedFile
    if former:
        follower_module.FollowedFile = FormerFollowedFile  # type: ignore[misc]
    try:
        follower = JobLogFollower(
            scheduler, config, load_engine(), report, adaptive=False, share=share
        )
        await follower.refresh_jobs()
        await follower.poll_once()
        rounds: list[float] = []
        served = 0
        cpu = time.process_time()
        for number in range(args.flood_rounds):
            for name, chunk in chunks.items():
                with paths[name].open("ab") as out:
                    out.write(chunk)
            with paths[f"good{number}"].open("ab") as out:
                out.write(FATAL)
            began = time.monotonic()
            await follower.poll_once()
            rounds.append(time.monotonic() - began)
            served += str(len(chunks) + number) in reported
        cpu = time.process_time() - cpu
    finally:
        follower_module.FollowedFile = real_file  # type: ignore[misc]
    return {
        "round_p50_ms": statistics.median(rounds) * 1000,
        "round_max_ms": max(rounds) * 1000,
        "served_in_round": float(served),
        "cpu_s": cpu,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    counter = FsCounter()
    counter.install()
    try:
        with tempfile.TemporaryDirectory(prefix="follower-cost-") as tmp:
            after = await measure(args, Path(tmp), adaptive=True, counter=counter)
            before = await measure(args, Path(tmp), adaptive=False, counter=counter)
    finally:
        counter.remove()
    with tempfile.TemporaryDirectory(prefix="follower-floods-") as tmp:
        shared = await measure_floods(args, Path(tmp), former=False)
        former = await measure_floods(args, Path(tmp), former=True)
    return {
        "benchmark": "follower_cost",
        "jobs": args.jobs,
        "printing_jobs": args.printing,
        "duration_s": args.duration,
        "detect_p95_ms": round(after["detect_p95_ms"], 1),
        "detect_p50_ms": round(after["detect_p50_ms"], 1),
        "detections": int(after["detections"]),
        "missed": int(after["missed"]),
        "fs_ops_per_s": round(after["fs_ops_per_s"]),
        "naive_fs_ops_per_s": round(before["fs_ops_per_s"]),
        "naive_detect_p95_ms": round(before["detect_p95_ms"], 1),
        "naive_detect_p50_ms": round(before["detect_p50_ms"], 1),
        "fs_ops_ratio": round(before["fs_ops_per_s"] / max(after["fs_ops_per_s"], 1e-9), 1),
        "fs_ops_by_call": {k[4:]: round(v) for k, v in after.items() if k.startswith("ops_")},
        "flood_mib_per_round": args.flood_mib,
        "flood_round_p50_ms": round(shared["round_p50_ms"], 1),
        "flood_round_max_ms": round(shared["round_max_ms"], 1),
        "flood_good_served_in_round": int(shared["served_in_round"]),
        "flood_rounds": args.flood_rounds,
        "flood_cpu_s": round(shared["cpu_s"], 2),
        "former_flood_round_p50_ms": round(former["round_p50_ms"], 1),
        "former_flood_round_max_ms": round(former["round_max_ms"], 1),
        "former_flood_good_served_in_round": int(former["served_in_round"]),
        "former_flood_cpu_s": round(former["cpu_s"], 2),
        "flood_round_ratio": round(former["round_max_ms"] / max(shared["round_max_ms"], 1e-9), 1),
        "targets": {"detect_p95_ms": 100, "flood_round_max_ms": 200},
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--printing", type=int, default=60)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--fatal-every", type=float, default=0.15)
    parser.add_argument("--warmup", type=float, default=6.0, help="printing before measuring")
    parser.add_argument("--flood-rounds", type=int, default=4)
    parser.add_argument("--flood-mib", type=float, default=0.25, help="per hostile job a round")
    args = parser.parse_args(argv)
    print_result(asyncio.run(run(args)), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
