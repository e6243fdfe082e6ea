"""On the real local Slurm cluster: three hostile jobs flood their output (64 MiB of bare
newlines, 32 MiB of one line repeated, three million distinct lines) while a good job prints
a fatal GPU line. The real follower, reading the files slurmstepd wrote as the jobs'
owner, reports the good job's fault within two seconds of the write while the distinct
lines still wait for their turns; the newline flood got a note saying how much of it was
skipped unread."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from resurrect.config import ResurrectConfig
from resurrect.contracts import FaultClass, Interruption
from resurrect.demo.local_cluster import LocalSlurm
from resurrect.rules import load_engine
from resurrect.sensors.log_follower import JobLogFollower

pytestmark = [pytest.mark.slurm]

OPT_IN = json.dumps({"resurrect": {}})
FLOODS = {
    "newlines": ("head -c 64M /dev/zero | tr '\\0' '\\n'", 64 << 20),
    "repeated": ("yes '[rank0] loss 1.0000' | head -c 32M", 32 << 20),
    "distinct": ("seq 1 3000000", 22_888_896),
}


async def until(what: str, condition: object, timeout: float = 90) -> None:
    """Wait for ``condition()`` (polled), failing with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_good_jobs_fault_is_reported_in_time_beside_flooding_jobs(
    cluster: LocalSlurm,
) -> None:
    go = cluster.out_dir / f"go-{os.getpid()}-{time.monotonic_ns()}"
    go.unlink(missing_ok=True)
    hostile = {
        name: cluster.submit(f"echo started\n{command}\nsleep 600\n", comment=OPT_IN, nodes=1)
        for name, (command, _) in FLOODS.items()
    }
    good = cluster.submit(
        "echo started\n"
        f"while [ ! -e {go} ]; do sleep 0.05; done\n"
        'printf "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus. t=%s\\n"'
        ' "$(date +%s.%N)"\n'
        "sleep 600\n",
        comment=OPT_IN,
        nodes=1,
    )
    scheduler = cluster.scheduler()
    state = tempfile.TemporaryDirectory(prefix="resurrect-follower-slurm-")
    config = ResurrectConfig.model_validate(
        {"cluster": {"name": cluster.cluster_name}, "temporal": {"state_dir": state.name}}
    )
    reported = asyncio.Event()
    reports: list[tuple[float, Interruption]] = []

    behind: list[int] = []  # how far the distinct-lines flood was from read when reported

    async def report(interruption: Interruption) -> None:
        reports.append((time.time(), interruption))
        [file] = follower.jobs[(hostile["distinct"], 0)].files
        behind.append(os.stat(file.path).st_size - file.offset)
        reported.set()

    follower = JobLogFollower(scheduler, config, load_engine(), report)
    stop = asyncio.Event()
    loop = asyncio.create_task(follower.run(stop))
    try:
        followed = {*hostile.values(), good}
        await until(
            "every job followed", lambda: followed <= {job_id for job_id, _ in follower.jobs}
        )
        outputs = {
            name: Path(follower.jobs[(job_id, 0)].files[0].path) for name, job_id in hostile.items()
        }
        await until(
            "the floods written",
            lambda: all(outputs[name].stat().st_size >= size for name, (_, size) in FLOODS.items()),
        )
        go.touch()
        await asyncio.wait_for(reported.wait(), 60)
    finally:
        stop.set()
        await asyncio.wait_for(loop, 60)
        go.unlink(missing_ok=True)
        state.cleanup()
    at, interruption = reports[0]
    assert interruption.job_id == good and interruption.fault_hint is FaultClass.GPU_HARDWARE
    line = interruption.evidence[0].text
    latency = at - float(line.rsplit("t=", 1)[1])
    print(f"\nthe good job's fault reported {latency * 1000:.0f} ms after it was written")
    assert latency < 2.0  # before per-job shares: the floods held each round for minutes
    assert behind[0] > 1 << 20  # served while a flood still waited for its turns
    assert "bytes of output skipped unread" in follower.notes.latest[hostile["newlines"]]
