"""Attacks on the goodput report's read of a job's output (``read_output_tail``): a file of
another user reached through the job's own output path (a symlink at the path, or a
symlinked directory on the way), a FIFO, a sparse terabyte. Only a regular file of the job's
owner is read, as the log follower reads one; anything else gives no progress and a logged
note, without blocking."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from resurrect.contracts import JobInfo, JobState
from resurrect.goodput.collect import output_progress
from resurrect.goodput.progress import read_output_tail

STRANGER = 4242
STEP = "[rank0] step 7/100 loss 0.1 t=2026-11-30T06:00:07Z"


def test_another_users_file_is_not_read_whatever_the_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    secret = theirs / "secret.out"
    secret.write_text(f"{STEP}\n")
    os.chown(secret, STRANGER, STRANGER)
    mine = tmp_path / "mine"
    mine.symlink_to(theirs)  # a directory on the way is a symlink to the other user's
    owner = os.getuid()
    with caplog.at_level(logging.INFO):
        assert read_output_tail(secret, owner_uid=owner) == []
        assert read_output_tail(mine / "secret.out", owner_uid=owner) == []
    assert f"belongs to uid {STRANGER}, not the job's owner (uid {owner}): not read" in caplog.text
    # the same path to a file of the owner's is read: the inode read is the one checked
    os.chown(secret, owner, owner)
    assert read_output_tail(mine / "secret.out", owner_uid=owner) == [STEP, ""]


def test_the_goodput_record_reads_only_the_job_owners_output(tmp_path: Path) -> None:
    out = tmp_path / "slurm-8.out"
    out.write_text(f"{STEP}\n")
    job = JobInfo(job_id="8", state=JobState.RUNNING, stdout_path=str(out), user_id=STRANGER)
    progress = output_progress(job)
    assert progress is not None and progress.marks == []  # not the owner's file: no marks
    os.chown(out, STRANGER, STRANGER)
    progress = output_progress(job)
    assert progress is not None and [m.step for m in progress.marks] == [7]


def test_a_fifo_or_device_is_refused_and_a_sparse_terabyte_costs_its_tail(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo.out"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert read_output_tail(fifo, owner_uid=os.getuid()) == []
    assert read_output_tail(Path("/dev/zero")) == []
    sparse = tmp_path / "sparse.out"
    with sparse.open("wb") as handle:
        handle.truncate(1 << 40)
        handle.seek(1 << 40)
        handle.write(f"\n{STEP}\n".encode())
    assert read_output_tail(sparse, owner_uid=os.getuid())[-2:] == [STEP, ""]
    assert time.monotonic() - started < 10
