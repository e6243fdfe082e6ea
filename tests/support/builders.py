"""Builders of configurations, jobs, interruptions and recovery contexts shared by the tests.

Each test that talks to Temporal gets its own cluster name and task queue, so tests on one
server never see each other's workflows.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from resurrect.config import ResurrectConfig, merge_sections
from resurrect.contracts import Interruption, JobInfo, JobPolicy, JobState, RecoveryContext

# A job comment that opts the job in with resurrect's defaults.
OPT_IN = json.dumps({"resurrect": {}})


def opt_in(**policy: object) -> str:
    """A job comment opting the job in with this policy, e.g. ``opt_in(max_restarts=2)``."""
    return json.dumps({"resurrect": policy})


def make_config(state_dir: Path | None = None, **sections: object) -> ResurrectConfig:
    """A configuration with a fresh cluster name and task queue; ``sections`` are merged in
    (``make_config(mode="observe", recovery={"wait_running_timeout_s": 5})``)."""
    data: dict[str, Any] = {
        "cluster": {"name": f"t{uuid.uuid4().hex[:8]}"},
        "temporal": {"task_queue": f"q-{uuid.uuid4().hex}"},
    }
    if state_dir is not None:
        data["temporal"]["state_dir"] = str(state_dir)
    return ResurrectConfig.model_validate(merge_sections(data, sections))


def job(
    job_id: str = "100",
    *,
    state: JobState = JobState.NODE_FAIL,
    nodes: tuple[str, ...] = ("node1", "node2"),
    comment: str = OPT_IN,
    stdout: Path | None = None,
    restart_count: int = 0,
) -> JobInfo:
    """A 2-node job of alice's, opted in, that just ended with ``state``."""
    return JobInfo(
        job_id=job_id,
        name="train",
        state=state,
        user="alice",
        user_id=os.getuid(),  # the owner of the output files the tests write
        nodes=list(nodes),
        num_nodes=len(nodes),
        comment=comment,
        restart_count=restart_count,
        stdout_path=str(stdout) if stdout else None,
    )


def interruption(cluster: str, info: JobInfo, **extra: object) -> Interruption:
    """What the Slurm watcher reports for ``info`` (``extra`` overrides fields)."""
    data: dict[str, object] = {
        "cluster": cluster,
        "job_id": info.job_id,
        "restart_count": info.restart_count,
        "source": "test",
        "reason": f"job ended {info.state.value}",
        "observed_at": datetime.now(UTC),
        "job_state": info.state,
        "nodes": info.nodes,
    }
    data.update(extra)
    return Interruption.model_validate(data)


def recovery_context(report: Interruption, info: JobInfo, **fields: object) -> RecoveryContext:
    """What ``gather_evidence`` hands on for ``info`` after ``report``: the default policy
    from its comment, act mode, 60 s timeouts (``fields`` override any field)."""
    data: dict[str, object] = {
        "interruption": report,
        "job": info,
        "policy": JobPolicy(),
        "policy_source": "comment",
        "mode": "act",
        "wait_running_timeout_s": 60,
        "activity_timeout_s": 60,
    }
    data.update(fields)
    return RecoveryContext.model_validate(data)
