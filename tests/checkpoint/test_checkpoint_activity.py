"""The ``recovery.verify_checkpoint`` activity: a hostile checkpoint gets a clear note in
the recovery, and the helper doing the work dies with the activity (timeout or cancel)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.checkpoint_attacks import HelperProcesses, Victim, hostile_payloads, write_metadata
from temporalio.testing import ActivityEnvironment

from checkpoint.factory import make_dcp
from resurrect.activities.checkpoint_step import verify_checkpoint
from resurrect.checkpoint import MANIFEST_NAME
from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobPolicy, JobState, StepResult
from resurrect.steps.runtime import StepRuntime, make_activity
from resurrect.testing.fake_scheduler import FakeScheduler
from resurrect.testing.steps import make_step_input

pytestmark = pytest.mark.torch


def _env(timeout_s: float) -> ActivityEnvironment:
    """An activity environment with a real start time and start-to-close timeout."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        start_to_close_timeout=timedelta(seconds=timeout_s),
        schedule_to_close_timeout=None,
        started_time=datetime.now(UTC),
    )
    return env


def _activity_and_input(root: Path) -> tuple[Any, Any]:
    st = root.stat()
    job = JobInfo(
        job_id="42",
        state=JobState.FAILED,
        user="alice",
        user_id=st.st_uid,
        group_id=st.st_gid,
        nodes=["node1"],
    )
    step_input = make_step_input("recovery.verify_checkpoint", job=job)
    step_input.bundle.policy = JobPolicy(checkpoint_dir=str(root))
    runtime = StepRuntime(
        scheduler=FakeScheduler.with_nodes(2, cluster_name="test"), config=ResurrectConfig()
    )
    activity = make_activity(verify_checkpoint, runtime, activity_name="recovery.verify_checkpoint")
    return activity, step_input


async def test_hostile_checkpoint_gets_a_note_not_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "job"
    make_dcp(root / "step_1", seed=1)
    make_dcp(root / "step_2", seed=2)
    marker = tmp_path / "pwned"
    write_metadata(
        root / "step_2", hostile_payloads(marker)["operator.methodcaller via dotted names"]
    )
    victim = Victim.make(tmp_path)
    before = victim.snapshot()
    activity, step_input = _activity_and_input(root)
    result: StepResult = await _env(60).run(activity, step_input)
    assert not marker.exists() and victim.snapshot() == before
    verdict = result.checkpoint
    assert verdict is not None and verdict.latest_valid == str(root / "step_1")
    assert "disallowed dotted global" in verdict.candidates[0].reason
    assert "moved step_2 to .resurrect-quarantine/" in result.detail


async def test_a_step_run_again_says_what_its_earlier_run_set_aside(tmp_path: Path) -> None:
    """The step's first run, stopped after it moved the torn checkpoint (here: it ended),
    is followed by a run that finds nothing torn: its note still names the set-aside."""
    root = tmp_path / "job"
    make_dcp(root / "step_1", seed=1)
    make_dcp(root / "step_2", seed=2)
    (root / "step_2" / ".metadata").write_bytes(b"torn")
    activity, step_input = _activity_and_input(root)
    first: StepResult = await _env(60).run(activity, step_input)
    assert "moved step_2 to .resurrect-quarantine/" in first.detail
    again: StepResult = await _env(60).run(activity, step_input)
    assert again.checkpoint is not None and again.checkpoint.latest_valid == str(root / "step_1")
    assert "was set aside into .resurrect-quarantine earlier in this recovery" in again.detail, (
        again.detail
    )
    assert again.checkpoint.quarantined == first.checkpoint.quarantined  # type: ignore[union-attr]


async def test_the_helper_dies_with_a_cancelled_activity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "job"
    ckpt = make_dcp(root / "step_1", seed=1)
    with open(ckpt / "big.dat", "wb") as fh:
        fh.truncate(200 << 30)  # sparse, under the size cap: a full hash takes minutes
    entry = {"path": "big.dat", "size": 200 << 30, "sha256": "0" * 64}
    (ckpt / MANIFEST_NAME).write_text(json.dumps({"version": 1, "files": [entry]}))
    helpers = HelperProcesses(monkeypatch)
    activity, step_input = _activity_and_input(root)
    step_input.params = {"level": "full"}
    env = _env(600)
    task = asyncio.create_task(env.run(activity, step_input))
    deadline = time.monotonic() + 30
    while not helpers.started and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # the helper is hashing now
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 15)
    helpers.assert_one_ran_and_is_gone()
