"""Attacks on the checkpoint-progress look (hang detection): a save directory of 100,000
entries, a directory that changes before every look, a checkpoint_dir that is someone
else's or reached through a symlink. A look lists a directory again only when it changed,
the entries it reads count against the job's budget, and a directory that is not the job
owner's is never watched (the job gets a note; another job is still served)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from support.clock import Clock
from support.reports import Reports

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState
from resurrect.rules.engine import default_engine
from resurrect.sensors.checkpoint_progress import (
    ENTRIES_BURST,
    ENTRIES_PER_S,
    NEWEST_KEPT,
    CheckpointProgress,
)
from resurrect.sensors.log_follower import JobLogFollower
from resurrect.testing import FakeScheduler

STRANGER = 4242
STATE = tempfile.TemporaryDirectory(prefix="resurrect-checkpoint-listing-")
CONFIG = ResurrectConfig.model_validate(
    {"cluster": {"name": "c1"}, "temporal": {"state_dir": STATE.name}}
)
XID = b"NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus on node2\n"


def make_save(root: Path, entries: int) -> Path:
    """A checkpoint directory whose newest save holds ``entries`` files."""
    (root / "step_000100").mkdir(parents=True)
    save = root / "step_000200"
    save.mkdir()
    for index in range(entries):
        os.close(os.open(save / f"__{index}_0.distcp", os.O_CREAT | os.O_WRONLY, 0o644))
    return save


def test_a_quiet_look_at_a_save_of_100k_entries_lists_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    make_save(root, 100_000)
    clock = Clock()
    progress = CheckpointProgress(str(root), min_interval_s=1, owner_uid=os.getuid(), clock=clock)
    assert progress.changed() is False  # following starts: the one full listing
    assert progress.entries_read > 100_000
    first = progress.entries_read
    looks = 60
    started = time.process_time()
    for _ in range(looks):  # one a second, as in adaptive mode
        clock.now += 1
        assert progress.changed() is False
    cpu_per_look = (time.process_time() - started) / looks
    per_look = (progress.entries_read - first) / looks
    assert per_look <= 2 * NEWEST_KEPT  # the newest few of each directory, never a listing
    assert cpu_per_look < 0.01  # the full listing of the save cost 97-186 ms a look before


def test_writes_in_the_newest_save_are_still_seen(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    save = make_save(root, 2_000)
    shard = save / "__2000_0.distcp"
    shard.write_bytes(b"being written")
    clock = Clock()
    progress = CheckpointProgress(str(root), min_interval_s=1, clock=clock)
    progress.changed()
    for _ in range(3):  # the shard being written grows in place: no entry added
        clock.now += 1
        with shard.open("ab") as out:
            out.write(b" more")
        before = progress.entries_read
        assert progress.changed() is True
        assert progress.entries_read - before <= 2 * NEWEST_KEPT  # no listing
    clock.now += 1
    (save / "__new_0.distcp").write_bytes(b"a new shard")
    before = progress.entries_read
    assert progress.changed() is True
    assert progress.entries_read - before < 2_001 + 3 * NEWEST_KEPT  # one listing, one stat new
    clock.now += 1
    assert progress.changed() is False


def test_a_directory_changed_before_every_look_is_listed_only_as_the_budget_allows(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ckpt"
    save = make_save(root, 50_000)
    clock = Clock()
    progress = CheckpointProgress(str(root), min_interval_s=1, clock=clock)
    progress.changed()
    first = progress.entries_read
    looks = 100
    for look in range(looks):  # the job adds an entry before every look
        clock.now += 1
        (save / f"poke-{look}").touch()
        assert progress.changed() is True  # its stamp moved: activity, listed or not
    read = progress.entries_read - first
    # a 50,000-entry listing at every look would be 5,000,000 entries read
    assert read <= ENTRIES_BURST - first + looks * ENTRIES_PER_S + 50_000 + looks * 3 * NEWEST_KEPT
    assert read < 20 * 50_000


def test_a_checkpoint_dir_that_is_not_the_owners_is_never_watched(tmp_path: Path) -> None:
    other = tmp_path / "someone-elses"
    make_save(other, 10)
    os.chown(other, STRANGER, STRANGER)
    link = tmp_path / "mine"
    link.symlink_to(other)  # the job's own path, pointing at another user's directory
    for directory in (other, link):
        progress = CheckpointProgress(str(directory), min_interval_s=1, owner_uid=os.getuid())
        assert progress.changed() is False and progress.changed_since(0) is False
        assert progress.refused is not None and f"not by the job's owner (uid {os.getuid()})" in (
            progress.refused
        )
        assert progress.entries_read == 0 and progress.fs_ops == 2  # two opens, nothing read
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    progress = CheckpointProgress(str(shared), min_interval_s=1, owner_uid=os.getuid())
    assert progress.changed() is False
    assert progress.refused is not None and "without the sticky bit" in progress.refused


def test_a_symlinked_save_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "ckpt"
    make_save(root, 3)
    clock = Clock()
    progress = CheckpointProgress(str(root), min_interval_s=1, clock=clock)
    progress.changed()
    (root / "step_999999").symlink_to(elsewhere)  # the newest "save" escapes the directory
    clock.now += 1
    assert progress.changed() is True  # a new entry, seen from the directory's own stamp
    for index in range(5):
        (elsewhere / f"file{index}").write_bytes(b"x")
        clock.now += 1
        assert progress.changed() is False  # what the link points at is never looked at


async def test_the_follower_notes_a_foreign_checkpoint_dir_and_serves_the_others(
    tmp_path: Path,
) -> None:
    other = tmp_path / "someone-elses"
    other.mkdir()
    os.chown(other, STRANGER, STRANGER)
    scheduler = FakeScheduler.with_nodes(2)
    for job_id, checkpoint_dir in (("30", other), ("31", tmp_path)):
        out = tmp_path / f"{job_id}.out"
        out.write_bytes(b"[rank0] step 1\n")
        scheduler.jobs[job_id] = JobInfo(
            job_id=job_id,
            state=JobState.RUNNING,
            nodes=["node2"],
            comment=json.dumps({"resurrect": {"checkpoint_dir": str(checkpoint_dir)}}),
            stdout_path=str(out),
            user_id=os.getuid(),
        )
    reports = Reports()

    follower = JobLogFollower(scheduler, CONFIG, default_engine(), reports)
    await follower.refresh_jobs()
    await follower.poll_once()
    with (tmp_path / "31.out").open("ab") as out:
        out.write(XID)
    await follower.poll_once()
    assert [r.job_id for r in reports] == ["31"]
    assert "not by the job's owner" in follower.notes.latest["30"]
    assert "31" not in follower.notes.latest
