"""Demo scenarios about checkpoints on the live cluster: a damaged newest checkpoint is
quarantined and the one before it resumed; a job that fails at the same step on every
attempt is stopped after K restarts that made no progress."""

from __future__ import annotations

import pwd
from pathlib import Path
from typing import Any

from support.demo_runs import DEMO_MARKS, run_demo

from resurrect.demo.local_cluster import DEMO_USER

pytestmark = DEMO_MARKS


async def test_damaged_newest_checkpoint_falls_back_and_still_ends_bitwise_equal(
    demo_state_dir: Path,
    demo_references: Path,
) -> None:
    result = await run_demo("checkpoint-damage", demo_state_dir, demo_references)
    assert result["recovered"] and result["job_completed"], result
    damaged = Path(str(result["damaged_checkpoint"]))
    newest_step = int(damaged.parent.name.split("_")[1])
    assert result["resumed_from_step"] == newest_step - 20  # the one before the torn one
    # moved aside, never deleted (training then wrote a fresh one of the same step)
    quarantine = damaged.parent.parent / ".resurrect-quarantine"
    [kept] = [p for p in quarantine.iterdir() if p.name.startswith(damaged.parent.name)]
    assert (kept / damaged.name).stat().st_size > 0
    assert result["params_equal_uninterrupted"] is True
    # what the step set aside is in the note, also when an earlier run of the step (stopped
    # after its seconds) had moved it and the run that chose found nothing torn
    note = str(result["checkpoint_note"])
    assert "quarantin" in note, note


async def test_a_job_that_breaks_its_gpu_on_every_attempt_is_stopped_after_k_restarts(
    demo_state_dir: Path,
    demo_references: Path,
) -> None:
    """Each attempt resumes from the same checkpoint and dies at the same step with a GPU
    error its node's agent confirms: free restarts, until K of them made no progress."""
    result = await run_demo("crash-loop", demo_state_dir, demo_references, no_progress_restarts=2)
    assert result["loop_stopped"] and result["action"] == "stop", result
    assert result["restarts"] == 2 and not result["job_completed"]
    attempts: list[dict[str, Any]] = result["attempts"]  # type: ignore[assignment]
    assert [a["restart_count"] for a in attempts] == [0, 1, 2]
    assert {a["fault_class"] for a in attempts} == {"gpu.hardware"}
    # the restarts were free: the node agent's Xid agreed with what the job printed
    assert [a["charged"] for a in attempts[:2]] == [False, False], attempts
    # one job incarnation across the requeues, though Slurm reset the submit time at each
    incarnations = {a["incarnation"] for a in attempts}
    assert len(incarnations) == 1 and None not in incarnations, attempts
    owner = pwd.getpwnam(DEMO_USER).pw_uid
    assert str(incarnations.pop()).startswith(f"{owner}/"), attempts
    assert attempts[0]["drained_nodes"] == [attempts[0]["gpu_error_node"]], attempts
    # each recovery judged its own attempt's output (the job appends every attempt to one
    # file): it acted on the node that failed in that attempt, never on an earlier one's
    assert all(a["culprit_hosts"] == [a["gpu_error_node"]] for a in attempts), attempts
    for attempt in attempts[:2]:
        acted_on = set(attempt["drained_nodes"]) | set(attempt["excluded_nodes"])
        assert attempt["gpu_error_node"] in acted_on, attempts
    # every attempt died at the step of the fault, resumed from the checkpoint before it
    fault_step, checkpoint_step = 45, 40
    assert [a["last_step"] for a in attempts] == [fault_step] * 3, attempts
    assert [a["resume_step"] for a in attempts[:2]] == [checkpoint_step] * 2, attempts
    reason = str(result["stop_reason"])
    assert "the last 2 restarts made no progress" in reason, reason
    # progress counts only from checkpoints that verified (printed steps can be faked)
    assert "printed steps do not count" in reason, reason
    for attempt in (0, 1, 2):
        assert f"attempt {attempt}: newest verified checkpoint step {checkpoint_step}" in reason
    assert reason in result["recovery_notes"]  # type: ignore[operator]
    print(
        f"\ncrash-loop demo: stopped after {result['restarts']} restarts,"
        f" {result['time_to_stop_s']} s from the first fault"
    )
