"""Attacks on the log follower's time: jobs that print megabytes of bare newlines, one line
repeated, huge lines, or endless distinct lines must not delay another job's fault
detection. Each look at a job takes at most its share (bytes, distinct lines, CPU time),
jobs are served in turn, blank and repeated lines cost C loops only, and a job that falls too
far behind is skipped ahead with a note saying how much was not read."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

from support.reports import Reports

from resurrect.config import ResurrectConfig
from resurrect.contracts import FaultClass, Interruption, JobInfo, JobState
from resurrect.rules.engine import default_engine
from resurrect.sensors.follower_share import DEFAULT_SHARE, FollowerShare
from resurrect.sensors.log_follower import JobLogFollower
from resurrect.testing import FakeScheduler

STATE = tempfile.TemporaryDirectory(prefix="resurrect-follower-budget-")
CONFIG = ResurrectConfig.model_validate(
    {
        "cluster": {"name": "c1"},
        "temporal": {"state_dir": STATE.name},
        "watcher": {"poll_interval_s": 0.05, "log_poll_interval_s": 0.02},
    }
)
OPT_IN = json.dumps({"resurrect": {}})
XID = b"NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus on node2\n"
MiB = 1 << 20


def floods() -> dict[str, bytes]:
    """What each hostile job prints once it is followed (the good job is served first)."""
    return {
        "newlines": b"\n" * (40 * MiB),  # past the share's max_behind: skipped with a note
        "repeated": b"[rank0] loss 1.0000\n" * (8 * MiB // 20),
        "alternating": b"a\n \nb\n\r\n" * (8 * MiB // 8),
        "huge lines": (b"y" * MiB + b"\n") * 8,
        "distinct": b"".join(b"%d\n" % n for n in range(1_000_000)),  # 6.9 MB of new lines
    }


def make_jobs(tmp_path: Path) -> tuple[FakeScheduler, dict[str, Path]]:
    scheduler = FakeScheduler.with_nodes(4)
    paths: dict[str, Path] = {}
    for number, name in enumerate([*floods(), "good"]):
        job_id = "7" if name == "good" else str(100 + number)
        path = tmp_path / f"{job_id}.out"
        path.write_bytes(b"[rank0] step 1\n")
        paths[name] = path
        scheduler.jobs[job_id] = JobInfo(
            job_id=job_id,
            state=JobState.RUNNING,
            nodes=["node1", "node2"],
            comment=OPT_IN,
            stdout_path=str(path),
        )
    return scheduler, paths


def attack(paths: dict[str, Path]) -> None:
    for name, data in floods().items():
        with paths[name].open("ab") as out:
            out.write(data)


async def test_a_good_jobs_fault_is_reported_in_the_round_the_floods_arrive(
    tmp_path: Path,
) -> None:
    scheduler, paths = make_jobs(tmp_path)
    reports = Reports()

    follower = JobLogFollower(scheduler, CONFIG, default_engine(), reports)
    await follower.refresh_jobs()
    await follower.poll_once()
    attack(paths)  # the hostile jobs come first in the round
    with paths["good"].open("ab") as out:
        out.write(XID)
    cpu = time.process_time()
    await follower.poll_once()
    spent = time.process_time() - cpu
    assert [r.job_id for r in reports] == ["7"]
    assert reports[0].fault_hint is FaultClass.GPU_HARDWARE
    # one share each (10 ms of CPU, 256 KiB) plus a few milliseconds to split a chunk; the
    # follower before shares spent 8 s on each MiB of newlines and read 4 MiB a look
    assert spent < 1.5
    for name, path in paths.items():
        [file] = follower.jobs[(path.stem, 0)].files
        if name == "newlines":
            assert file.offset == path.stat().st_size - DEFAULT_SHARE.resume_from + file.consumed
        elif name != "good":
            assert file.offset <= 2 * DEFAULT_SHARE.bytes  # the rest waits for its next turns
    note = follower.notes.latest["100"]
    skipped = 40 * MiB - DEFAULT_SHARE.resume_from  # its first line was read before
    assert note.startswith(f"{paths['newlines']}: {skipped} bytes of output skipped unread")
    assert set(follower.notes.latest) == {"100"}  # the others are not behind: no note


async def test_what_a_flooding_job_prints_after_its_flood_is_still_found(tmp_path: Path) -> None:
    """Nothing is lost silently: lines beyond a look's share are read at later looks."""
    out = tmp_path / "9.out"
    out.write_bytes(b"")
    scheduler = FakeScheduler.with_nodes(2)
    scheduler.jobs["9"] = JobInfo(
        job_id="9", state=JobState.RUNNING, nodes=["node2"], comment=OPT_IN, stdout_path=str(out)
    )
    reports = Reports()

    share = FollowerShare(bytes=64 << 10, lines=500)
    follower = JobLogFollower(scheduler, CONFIG, default_engine(), reports, share=share)
    await follower.refresh_jobs()
    out.write_bytes(b"".join(b"%d\n" % n for n in range(20_000)) + b"\n" * 100_000 + XID)
    looks = 0
    while not reports:
        looks += 1
        await follower.poll_once()
        assert looks < 100
    assert looks > 20_000 // 500  # many looks, each within the share
    assert reports[0].evidence[0].line == 120_001  # numbered as in the file
    assert follower.notes.latest == {}


async def test_a_flooded_stdout_does_not_hide_stderr(tmp_path: Path) -> None:
    stdout, stderr = tmp_path / "11.out", tmp_path / "11.err"
    stdout.write_bytes(b"")
    stderr.write_bytes(b"")
    scheduler = FakeScheduler.with_nodes(2)
    scheduler.jobs["11"] = JobInfo(
        job_id="11",
        state=JobState.RUNNING,
        nodes=["node2"],
        comment=OPT_IN,
        stdout_path=str(stdout),
        stderr_path=str(stderr),
    )
    reports = Reports()

    follower = JobLogFollower(scheduler, CONFIG, default_engine(), reports)
    await follower.refresh_jobs()
    stdout.write_bytes(b"".join(b"%d\n" % n for n in range(2_000_000)))
    stderr.write_bytes(XID)
    await follower.poll_once()
    await follower.poll_once()  # the files take turns going first
    assert [r.job_id for r in reports] == ["11"]


class CountingFollower(JobLogFollower):
    """The follower, counting the rounds that looked at the good job (job 7)."""

    rounds = 0

    async def _poll(self, keys: list[tuple[str, int]]) -> list[Interruption]:
        if ("7", 0) in keys:
            self.rounds += 1
        return await super()._poll(keys)


async def test_the_running_follower_serves_a_good_job_beside_floods(tmp_path: Path) -> None:
    scheduler, paths = make_jobs(tmp_path)
    reported = asyncio.Event()
    reported_in_round: list[int] = []

    async def report(i: Interruption) -> None:
        assert i.job_id == "7"
        reported_in_round.append(follower.rounds)
        reported.set()

    follower = CountingFollower(scheduler, CONFIG, default_engine(), report)
    stop = asyncio.Event()
    loop = asyncio.create_task(follower.run(stop))
    while len(follower.jobs) < len(paths):
        await asyncio.sleep(0.01)  # until the first refresh followed every job
    attack(paths)
    with paths["good"].open("ab") as out:
        out.write(XID)
    written_in_round = follower.rounds  # (a round in flight may have looked at it already)
    await asyncio.wait_for(reported.wait(), 60)
    deadline = time.monotonic() + 60
    while "100" not in follower.notes.latest:  # the flood's own turn may come after the report
        assert time.monotonic() < deadline, follower.notes.latest
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(loop, 10)
    # served at its next turn whatever the floods hold (before shares: a round read 4 MiB of
    # each flood, minutes of CPU); turns, not seconds, so a loaded machine cannot fail it
    assert reported_in_round[0] - written_in_round <= 1
    assert "skipped unread" in follower.notes.latest["100"]
