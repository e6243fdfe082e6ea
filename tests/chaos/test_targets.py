"""Which running job a soak fault hits (benchmarks/chaos/inject.py): a fault of one rank
among its peers (a stopped rank, a straggler) hits only a job that has peers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.chaos.inject import Skip, pick_job
from benchmarks.chaos.jobs import SHAPES, Submitted
from benchmarks.chaos.schedule import Injection
from resurrect.contracts import JobInfo, JobState

BY_SHAPE = {shape.name: shape for shape in SHAPES}


def soak_running(**jobs: str) -> Any:
    """A soak whose jobs (id -> shape name) all run, each on its own node."""
    info = {
        jid.lstrip("j"): JobInfo(job_id=jid.lstrip("j"), state=JobState.RUNNING, nodes=[f"n{i}"])
        for i, jid in enumerate(jobs)
    }
    submitted = {
        jid.lstrip("j"): Submitted(jid.lstrip("j"), BY_SHAPE[shape], Path("/dev/null"), None, 0.0)
        for jid, shape in jobs.items()
    }
    return SimpleNamespace(job_info=info, submitted=submitted, faulted_nodes={})


def hit(pick: float) -> Injection:
    return Injection(offset_s=50.0, kind="rank_hang", pick=pick, index=0)


def test_a_fault_of_one_rank_among_its_peers_never_hits_a_one_rank_job() -> None:
    soak = soak_running(j1="srun-1n", j2="torchrun-2n", j3="srun-1n")
    assert {pick_job(soak, hit(p), min_world=2).job_id for p in (0.0, 0.5, 0.99)} == {"2"}
    assert {pick_job(soak, hit(p)).job_id for p in (0.0, 0.5, 0.99)} == {"1", "2", "3"}


def test_with_no_job_of_two_ranks_running_the_fault_is_skipped_and_says_why() -> None:
    soak = soak_running(j1="srun-1n")
    with pytest.raises(Skip, match="of 2 ranks or more"):
        pick_job(soak, hit(0.3), min_world=2)
