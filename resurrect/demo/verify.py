"""How a demo checks a recovery: what it cost the job, whether training ended where an
uninterrupted run ends, and whom the diagnosis blamed."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from resurrect.contracts import RecoveryOutcome, SignalKind
from resurrect.demo.stage import Stage, read_text
from resurrect.goodput.accounting import lost_by_part
from resurrect.goodput.history import load_recoveries
from resurrect.goodput.model import JobGoodput
from resurrect.goodput.report import job_goodput

# The uninterrupted run's final parameters sha per (python, repo, steps, checkpoint interval):
# training is deterministic, so one reference run per settings serves every demo this process
# runs (the test suite runs several).
_REFERENCE_SHAS: dict[tuple[str, str, int, int], str] = {}


async def job_cost(stage: Stage) -> JobGoodput:
    """What the interruptions cost the job (``resurrect goodput --job``)."""
    cluster = stage.cluster
    recoveries = await load_recoveries(
        stage.client, job_id=stage.job_id, cluster=cluster.cluster_name
    )
    cost = await job_goodput(
        cluster.scheduler(), cluster.cluster_name, stage.job_id, recoveries, datetime.now(UTC)
    )
    lost = ", ".join(f"{k} {v:.1f} s" for k, v in lost_by_part(cost).items())
    shown = f"{cost.goodput * 100:.1f}%" if cost.goodput is not None else "unknown"
    stage.say(f"goodput {shown} of {cost.wall_s:.1f} s; lost: {lost}")
    return cost


async def uninterrupted_sha(stage: Stage) -> str | None:
    """The final parameters sha of the same training run uninterrupted on this host (once
    per settings in this process, or in every process sharing ``settings.reference_dir``:
    training is deterministic)."""
    s = stage.settings
    key = (s.python, str(stage.root), stage.train_steps or s.train_steps, s.ckpt_every)
    known = _REFERENCE_SHAS.get(key)
    if known is not None:
        stage.say("comparing with this process' earlier uninterrupted run of the same")
        return known
    if s.reference_dir is None:
        sha = await asyncio.to_thread(_train_uninterrupted, stage)
    else:
        sha = await asyncio.to_thread(_shared_reference, stage, s.reference_dir, key)
    if sha is not None:
        _REFERENCE_SHAS[key] = sha
    return sha


def _shared_reference(stage: Stage, directory: Path, key: tuple[str, str, int, int]) -> str | None:
    """The reference sha kept in ``directory`` for ``key`` (and ``train.py`` as it is now),
    or trained and kept there; one process trains while the others wait for its answer."""
    script = stage.root / "examples" / "train" / "train.py"
    name = hashlib.sha256(repr((key, script.read_bytes())).encode()).hexdigest()[:24]
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    kept = directory / f"{name}.sha256"
    with open(directory / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        known = read_text(kept)
        if known:
            stage.say("comparing with another demo process' uninterrupted run of the same")
            return known
        sha = _train_uninterrupted(stage)
        if sha is not None:
            partial = kept.with_suffix(".partial")
            partial.write_text(sha)
            partial.rename(kept)
        return sha


def _train_uninterrupted(stage: Stage) -> str | None:
    """Train the job's settings uninterrupted on this host; its final params sha."""
    s = stage.settings
    stage.say("running the same training uninterrupted (torchrun --standalone)")
    ckpt = stage.cluster.out_dir / f"reference-{int(time.time())}"
    argv = [
        s.python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(stage.root / "examples" / "train" / "train.py"),
        "--ckpt-dir", str(ckpt), "--steps", str(stage.train_steps or s.train_steps),
        "--ckpt-every", str(s.ckpt_every),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RESURRECT_TRAIN"))}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        stage.say(f"reference run failed: {result.stderr[-500:]}")
        return None
    return read_text(ckpt / "final.sha256")


def final_sha(stage: Stage) -> str | None:
    """The final parameters sha the job wrote, if it finished."""
    return read_text(stage.ckpt_dir / "final.sha256")


def culprit(outcome: RecoveryOutcome) -> tuple[int | None, str | None]:
    """The culprit rank and node the recovery's diagnosis names from the ranks' stacks (a
    hang) or from who waits for whom (a straggler)."""
    diagnosis = outcome.diagnosis
    if diagnosis is None:
        return None, None
    for evidence in [*diagnosis.evidence, *diagnosis.cascade]:
        if (
            evidence.kind in (SignalKind.STACK_DUMP, SignalKind.PROGRESS)
            and evidence.role == "root"
        ):
            return evidence.rank, evidence.host
    ranks, hosts = diagnosis.culprit_ranks, diagnosis.culprit_hosts
    return (ranks[0] if ranks else None), (hosts[0] if hosts else None)
