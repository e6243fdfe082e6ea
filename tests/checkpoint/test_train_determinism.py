"""The example training job: resume from a verified checkpoint is bitwise deterministic.

Each case runs ``examples/train/train.py`` under torchrun (2 processes, gloo, CPU) and
compares the sha256 of the final parameters with an uninterrupted run's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoint.factory import shard_files, truncate
from resurrect.checkpoint import prepare_resume, resume_path

pytestmark = pytest.mark.torch

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train" / "train.py"
STEPS, EVERY = 40, 10
RUN_TIMEOUT_S = 120


def _train(
    ckpt: Path, out: Path, *, stop_at: int | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RESURRECT_TRAIN_STOP_AT_STEP", None)
    if stop_at is not None:
        env["RESURRECT_TRAIN_STOP_AT_STEP"] = str(stop_at)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(TRAIN),
        "--ckpt-dir",
        str(ckpt),
        "--out-dir",
        str(out),
        "--steps",
        str(STEPS),
        "--ckpt-every",
        str(EVERY),
        "--log-every",
        "5",
    ]
    return _run(cmd, env)


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run in a new session; on timeout kill the whole group (launcher and workers)."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {RUN_TIMEOUT_S}s: {cmd}\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _sha(out: Path) -> str:
    return (out / "final.sha256").read_text().strip()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    base = tmp_path_factory.mktemp("reference")
    run = _train(base / "ckpt", base / "out")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"[rank0] step {STEPS}/{STEPS} loss " in run.stdout
    assert "[rank1] step 10/40 loss " in run.stdout
    return _sha(base / "out")


def test_interrupted_then_resumed_is_bitwise_equal(tmp_path: Path, reference: str) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    first = _train(ckpt, out, stop_at=25)
    assert first.returncode != 0 and "stopping hard after step 25" in first.stdout
    assert not (out / "final.sha256").exists()
    assert resume_path(ckpt) == ckpt / "step_20"
    second = _train(ckpt, out)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"[rank0] resumed from {ckpt / 'step_20'} at step 20" in second.stdout
    assert _sha(out) == reference


def test_damaged_newest_quarantined_then_resumed_is_bitwise_equal(
    tmp_path: Path, reference: str
) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    first = _train(ckpt, out, stop_at=35)
    assert first.returncode != 0
    truncate(shard_files(ckpt / "step_30")[0])
    verdict = prepare_resume(ckpt, level="full")
    assert verdict.latest_valid == str(ckpt / "step_20")
    assert len(verdict.quarantined) == 1 and "step_30" in verdict.quarantined[0]
    second = _train(ckpt, out)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"resumed from {ckpt / 'step_20'} at step 20" in second.stdout
    assert _sha(out) == reference
    # The damaged checkpoint is kept, moved aside; the job saved a fresh step_30.
    assert Path(verdict.quarantined[0]).is_dir() and (ckpt / "step_30").is_dir()
    assert prepare_resume(ckpt, level="full", act=False).latest_valid == str(ckpt / "step_40")


def test_hint_is_honoured_by_the_job(tmp_path: Path, reference: str) -> None:
    """A sha mismatch (invisible to quick checks) is handled via quarantine + hint."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    assert _train(ckpt, out, stop_at=30).returncode != 0
    shard = shard_files(ckpt / "step_30")[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert resume_path(ckpt) == ckpt / "step_30"  # quick cannot see it
    verdict = prepare_resume(ckpt, level="full")
    assert verdict.latest_valid == str(ckpt / "step_20")
    second = _train(ckpt, out)
    assert second.returncode == 0, second.stdout + second.stderr
    assert _sha(out) == reference


SBATCH = TRAIN.parent / "train.sbatch"

FAKE_SRUN = """#!/bin/bash
# Test stand-in for srun: run the command once per "node", as Slurm would, in parallel.
pids=()
while [[ "$1" == --* ]]; do shift; done
for node in $(seq 0 $(( SLURM_NNODES - 1 ))); do
    SLURM_NODEID=$node SLURM_PROCID=$node "$@" &
    pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
exit $rc
"""

FAKE_SCONTROL = """#!/bin/bash
# Test stand-in for scontrol: hostnames of the allocation; nodes have no NodeAddr.
if [[ "$1 $2" == "show hostnames" ]]; then printf 'vnode1\\nvnode2\\n'; exit 0; fi
exit 1
"""


def _sbatch(
    ckpt: Path, bin_dir: Path, restart: int, stop_at: int | None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "vnode[1-2]",
        "SLURM_RESTART_COUNT": str(restart),
        "RESURRECT_PYTHON": sys.executable,
        "RESURRECT_TRAIN_DIR": str(TRAIN.parent),
        "CKPT_DIR": str(ckpt),
        "RESURRECT_TRAIN_STEPS": str(STEPS),
        "RESURRECT_TRAIN_CKPT_EVERY": str(EVERY),
        "OMP_NUM_THREADS": "1",
    }
    env.pop("RESURRECT_TRAIN_STOP_AT_STEP", None)
    if stop_at is not None:
        env["RESURRECT_TRAIN_STOP_AT_STEP"] = str(stop_at)
    return _run(["bash", str(SBATCH)], env)


def test_sbatch_two_nodes_requeued_is_bitwise_equal(tmp_path: Path, reference: str) -> None:
    """train.sbatch with stand-in srun/scontrol: 2 'nodes' (one torchrun each), killed, then
    requeued (SLURM_RESTART_COUNT=1) - resumes and ends equal to the uninterrupted run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    ckpt = tmp_path / "ckpt"
    first = _sbatch(ckpt, bin_dir, restart=0, stop_at=25)
    assert first.returncode != 0
    assert "master 127.0.0.1:" in first.stdout
    assert "stopping hard after step 25" in first.stdout
    second = _sbatch(ckpt, bin_dir, restart=1, stop_at=None)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "restart count 1" in second.stdout
    assert f"resumed from {ckpt / 'step_20'} at step 20" in second.stdout
    assert (ckpt / "final.sha256").read_text().strip() == reference
