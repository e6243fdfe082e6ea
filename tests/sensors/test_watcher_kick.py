from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
from pathlib import Path

from support.builders import OPT_IN, make_config
from support.reports import Reports

from resurrect.contracts import JobInfo, JobState
from resurrect.sensors.slurm_watcher import SlurmWatcher
from resurrect.sensors.watcher_kick import KickListener, send_kick
from resurrect.testing import FakeScheduler

HOOK = Path(__file__).resolve().parents[2] / "deploy" / "hooks" / "kick-watcher.sh"


async def test_a_kick_from_the_slurm_hook_makes_the_watcher_poll_at_once() -> None:
    # AF_UNIX paths are short: keep the socket out of pytest's long tmp path
    sock = Path(tempfile.mkdtemp(prefix="kick-")) / "watcher.sock"
    config = make_config(watcher={"poll_interval_s": 60})
    scheduler = FakeScheduler.with_nodes(2)
    scheduler.jobs["5"] = JobInfo(
        job_id="5", state=JobState.RUNNING, nodes=["node1"], comment=OPT_IN
    )
    reports = Reports()

    watcher = SlurmWatcher(scheduler, config, reports)
    listener = KickListener(sock, lambda reason: watcher.kick())
    await listener.start()
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        while watcher.polls < 1:  # the first poll done; the next is 60 s away
            await asyncio.sleep(0.01)
        scheduler.jobs["5"] = scheduler.jobs["5"].model_copy(update={"state": JobState.NODE_FAIL})
        started = time.monotonic()
        hook = subprocess.run(
            [str(HOOK)],
            env={
                "RESURRECT_KICK_SOCKET": str(sock),
                "JOBID": "5",
                "JOBSTATE": "NODE_FAIL",
                "PATH": "/usr/bin:/bin",
            },
            timeout=10,
        )
        assert hook.returncode == 0
        while not reports and time.monotonic() - started < 5:
            await asyncio.sleep(0.05)
        assert [r.job_id for r in reports] == ["5"]
        assert time.monotonic() - started < 3 and watcher.kicks == 1
    finally:
        stop.set()
        await task
        listener.close()
    assert not sock.exists()
    # with nobody listening, hooks and send_kick fail open
    assert send_kick(sock) is False
    assert (
        subprocess.run(
            [str(HOOK)],
            env={"RESURRECT_KICK_SOCKET": str(sock), "PATH": "/usr/bin:/bin"},
            timeout=10,
        ).returncode
        == 0
    )
