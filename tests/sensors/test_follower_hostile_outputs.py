"""Attacks through the job's output file: a FIFO, socket, device, directory, symlink, a file
of someone else's, or a huge sparse file must not block or exhaust the log follower or the
``recovery.assess`` activity; the job gets a note, and every other job is still served."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.builders import recovery_context
from support.reports import Reports
from temporalio.testing import ActivityEnvironment

import resurrect.activities.recovery as recovery_module
from resurrect.activities.recovery import RecoveryActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    RecoveryContext,
)
from resurrect.errors import JobFileRefused
from resurrect.log_reading import Budget, TailRead, open_job_file, read_tail
from resurrect.rules.engine import default_engine
from resurrect.sensors.log_follower import FollowedFile, JobLogFollower
from resurrect.testing import FakeScheduler

CONFIG = ResurrectConfig.model_validate(
    {"cluster": {"name": "c1"}, "watcher": {"poll_interval_s": 0.05, "log_poll_interval_s": 0.02}}
)
OPT_IN = json.dumps({"resurrect": {}})
XID = b"NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus on node2\n"


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """One job-owned path of each kind that must not be read."""
    fifo = tmp_path / "fifo.out"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.out"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    (tmp_path / "dir.out").mkdir()
    (tmp_path / "zero.out").symlink_to("/dev/zero")
    (tmp_path / "other.out").symlink_to(tmp_path / "regular.out")
    (tmp_path / "regular.out").write_text("fine\n")
    try:
        yield {
            "a FIFO": fifo,
            "a socket": sock_path,
            "a directory": tmp_path / "dir.out",
            "a symlink": tmp_path / "zero.out",
            "a symlink ": tmp_path / "other.out",
            "a character device": Path("/dev/zero"),
        }
    finally:
        server.close()


def test_only_regular_files_are_opened_never_blocking(hostile: dict[str, Path]) -> None:
    for kind, path in hostile.items():
        started = time.monotonic()
        with pytest.raises(JobFileRefused, match=f"is {kind.strip()}, not a regular file"):
            open_job_file(path, None)
        assert time.monotonic() - started < 1.0
        tail = read_tail(path, 1 << 20)
        assert tail.lines == [] and tail.note and "not read" in tail.note


def test_a_file_that_is_not_the_owners_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root's secret\n")
    os.chown(secret, 0, 0)
    tail = read_tail(secret, 1 << 20, owner_uid=4242)
    assert tail.lines == [] and tail.note and "not the job's owner" in tail.note
    os.chown(secret, 4242, 4242)
    assert read_tail(secret, 1 << 20, owner_uid=4242).lines == [(1, "root's secret")]


def test_a_huge_sparse_file_costs_only_its_tail(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.out"
    with open(sparse, "wb") as handle:
        handle.write(b"head line\n")
        handle.seek(1 << 40)  # a terabyte of hole
        handle.write(b"\n" + XID)
    started = time.monotonic()
    tail = read_tail(sparse, 256 << 10)
    assert tail.lines[-1][1] == XID.decode().strip()
    followed = FollowedFile(str(sparse))
    lines = followed.read_new_lines()
    assert lines[-1][1] == XID.strip() and followed.line_number is None
    assert followed.read_new_lines() == []
    assert time.monotonic() - started < 2.0


def test_a_huge_dense_file_is_followed_from_its_last_mebibytes(tmp_path: Path) -> None:
    big = tmp_path / "big.out"
    with open(big, "wb") as handle:
        handle.write(b"noise line\n" * (2 << 20))  # 22 MiB
        handle.write(XID)
    followed = FollowedFile(str(big))
    read = 0
    while lines := followed.read_new_lines():
        read += len(lines)
    assert read < 1 << 20  # 8 MiB of the end, not 22 MiB from the top
    assert followed.offset == big.stat().st_size


async def test_follower_loop_serves_a_good_job_beside_hostile_ones(
    tmp_path: Path, hostile: dict[str, Path]
) -> None:
    good_out = tmp_path / "good.out"
    good_out.write_bytes(b"step 1\n")
    s = FakeScheduler.with_nodes(4)
    for number, path in enumerate(hostile.values()):
        s.jobs[f"{100 + number}"] = JobInfo(
            job_id=f"{100 + number}",
            state=JobState.RUNNING,
            nodes=["node1"],
            comment=OPT_IN,
            stdout_path=str(path),
        )
    s.jobs["99"] = JobInfo(  # a comment that crashed the loops before
        job_id="99",
        state=JobState.RUNNING,
        nodes=["node1"],
        comment='{"resurrect": {"max_restarts": ' + "9" * 5000 + "}}",
        stdout_path=str(good_out),
    )
    s.jobs["7"] = JobInfo(
        job_id="7",
        state=JobState.RUNNING,
        nodes=["node1", "node2"],
        comment=OPT_IN,
        stdout_path=str(good_out),
    )
    reports = Reports()

    follower = JobLogFollower(s, CONFIG, default_engine(), reports)
    stop = asyncio.Event()
    loop = asyncio.create_task(follower.run(stop))
    await asyncio.sleep(0.3)
    with open(good_out, "ab") as handle:
        handle.write(XID)
    for _ in range(100):
        if reports:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(loop, 5)
    assert [r.job_id for r in reports] == ["7"]
    assert reports[0].fault_hint is FaultClass.GPU_HARDWARE
    for number in range(len(hostile)):
        assert "not read" in follower.notes.latest[f"{100 + number}"]
    assert "not opted in" in follower.notes.latest["99"]


def _bundle(job: JobInfo) -> RecoveryContext:
    interruption = Interruption(
        cluster="c1",
        job_id=job.job_id,
        restart_count=0,
        source="slurm_watcher",
        reason="job ended FAILED",
        observed_at=datetime.now(UTC),
        job_state=JobState.FAILED,
    )
    return recovery_context(interruption, job)


async def test_attribute_refuses_a_fifo_with_a_note(hostile: dict[str, Path]) -> None:
    job = JobInfo(job_id="5", state=JobState.FAILED, stdout_path=str(hostile["a FIFO"]))
    activities = RecoveryActivities(FakeScheduler.with_nodes(1), CONFIG, default_engine())
    started = time.monotonic()
    diagnosis, _ = await ActivityEnvironment().run(activities.read_and_attribute, _bundle(job))
    assert time.monotonic() - started < 5
    assert "is a FIFO, not a regular file: not read" in diagnosis.summary


async def test_attribute_heartbeats_while_reading_and_gives_up_cleanly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A read that does not finish (a stalled file system) is heartbeated for, then given
    up with a note; the reading thread is told to stop and does."""
    returned = threading.Event()

    def stalled_read(path: str, max_bytes: int, **kwargs: object) -> TailRead:
        budget = kwargs["budget"]
        assert isinstance(budget, Budget) and budget.stop is not None
        budget.stop.wait()  # stuck until told to stop, whatever the deadline says
        returned.set()
        return TailRead(note="stopped")

    monkeypatch.setattr(recovery_module, "read_tail", stalled_read)
    monkeypatch.setattr(recovery_module, "HEARTBEAT_EVERY_S", 0.05)
    monkeypatch.setattr(recovery_module, "LOG_READ_BUDGET_S", 0.5)
    heartbeats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: heartbeats.append(details)
    job = JobInfo(job_id="6", state=JobState.FAILED, stdout_path=str(tmp_path / "x.out"))
    activities = RecoveryActivities(FakeScheduler.with_nodes(1), CONFIG, default_engine())
    diagnosis, _ = await env.run(activities.read_and_attribute, _bundle(job))
    assert len(heartbeats) >= 3
    assert "job output not read within 0.5 s: skipped" in diagnosis.summary
    assert returned.wait(5)  # the reading thread was told to stop, and did: none left blocked
