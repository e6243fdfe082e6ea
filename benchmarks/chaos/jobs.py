"""The soak's jobs: the shapes it keeps running (the example torchrun job, the srun-launched
job, a job that did not opt in), how one is submitted on the demo's cluster, and the final
parameters of a fault-free run of each training shape."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from resurrect.demo.local_cluster import LocalSlurm

TRAIN_DIR = Path(__file__).resolve().parents[2] / "examples" / "train"
CKPT_EVERY = 20
STEP_SLEEP_S = 0.1

# A job that did not opt in: one task printing steps for a while (Slurm does not requeue it).
PLAIN_JOB = """#!/bin/bash
srun bash -c 'for i in $(seq 1 {steps}); do echo "[$SLURMD_NODENAME] step $i"; sleep 0.5; done'
"""


@dataclass(frozen=True)
class JobShape:
    """One kind of job the soak keeps running (one slot of the cluster each)."""

    name: str
    script: str | None  # examples/train/<script>; None: PLAIN_JOB
    nodes: int
    steps: int
    max_restarts: int
    opted_in: bool

    @property
    def world(self) -> int:
        return self.nodes  # one rank a node


SHAPES: tuple[JobShape, ...] = (
    JobShape("torchrun-2n", "train.sbatch", 2, 400, 3, True),
    JobShape("srun-2n", "train-srun.sbatch", 2, 300, 2, True),
    JobShape("srun-1n", "train-srun.sbatch", 1, 250, 1, True),
    JobShape("plain-1n", None, 1, 120, 0, False),
)


def shapes_named(names: list[str]) -> tuple[JobShape, ...]:
    """The shapes called ``names``, in SHAPES order (ValueError for an unknown name)."""
    unknown = sorted(set(names) - {shape.name for shape in SHAPES})
    if unknown:
        raise ValueError(f"unknown job shapes: {', '.join(unknown)}")
    return tuple(shape for shape in SHAPES if shape.name in set(names))


@dataclass
class Submitted:
    job_id: str
    shape: JobShape
    output: Path
    ckpt_dir: Path | None
    submitted_at: float


def submit(cluster: LocalSlurm, shape: JobShape, python: str, port_base: int) -> Submitted:
    """sbatch one job of ``shape`` as the demo user; opted-in jobs name their checkpoints."""
    stamp = f"{shape.name}-{time.time_ns()}"
    if shape.script is None:
        job_id = cluster.submit(
            PLAIN_JOB.format(steps=shape.steps), nodes=shape.nodes, name=shape.name,
            requeue=False,
        )  # fmt: skip
        return Submitted(job_id, shape, _output(cluster, shape, job_id), None, time.time())
    ckpt = cluster.out_dir / f"ckpt-{stamp}"
    ckpt.mkdir(parents=True)
    shutil.chown(ckpt, user=cluster.demo_user)
    comment = json.dumps(
        {"resurrect": {"max_restarts": shape.max_restarts, "checkpoint_dir": str(ckpt)}},
        separators=(",", ":"),
    )
    export = (
        f"--export=ALL,RESURRECT_PYTHON={python},RESURRECT_TRAIN_DIR={TRAIN_DIR},"
        f"CKPT_DIR={ckpt},RESURRECT_TRAIN_STEPS={shape.steps},"
        f"RESURRECT_TRAIN_CKPT_EVERY={CKPT_EVERY},RESURRECT_TRAIN_SLEEP={STEP_SLEEP_S},"
        f"RESURRECT_MASTER_PORT_BASE={port_base}"
        + "".join(f",{k}={v}" for k, v in cluster.job_network_env.items())
    )
    job_id = cluster.submit(
        (TRAIN_DIR / shape.script).read_text(), comment=comment, nodes=shape.nodes,
        name=shape.name, extra_args=[export],
    )  # fmt: skip
    return Submitted(job_id, shape, _output(cluster, shape, job_id), ckpt, time.time())


def _output(cluster: LocalSlurm, shape: JobShape, job_id: str) -> Path:
    return cluster.out_dir / f"{shape.name}-{job_id}.out"


def fault_free_sha(python: str, shape: JobShape, scratch: Path) -> str:
    """The final parameters' sha of ``shape``'s training run uninterrupted on this host
    (torchrun --standalone, as many ranks as the job has)."""
    ckpt = scratch / f"reference-{shape.name}-{random.SystemRandom().randrange(1 << 30)}"
    argv = [
        python, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={shape.world}", str(TRAIN_DIR / "train.py"),
        "--ckpt-dir", str(ckpt), "--steps", str(shape.steps), "--ckpt-every", str(CKPT_EVERY),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RESURRECT_TRAIN"))}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"fault-free run of {shape.name} failed: {done.stderr[-800:]}")
    sha = (ckpt / "final.sha256").read_text().strip()
    shutil.rmtree(ckpt, ignore_errors=True)
    return sha


def append_line(path: Path, line: str) -> None:
    """Append ``line`` to a job's output, as the job printing it would. The file must exist:
    one the soak created (as root) would be one the job's own attempts cannot open
    (FileNotFoundError while the job has not started writing)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    with os.fdopen(fd, "a", encoding="utf-8") as out:
        out.write(line.rstrip("\n") + "\n")
