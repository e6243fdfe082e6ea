"""A small, real, deterministic DDP training job with resurrect-verified DCP checkpoints.

Run it with torchrun (gloo, CPU), on one machine or across nodes::

    torchrun --standalone --nproc_per_node=2 examples/train/train.py --ckpt-dir /tmp/ckpt

Every ``--ckpt-every`` steps it saves a PyTorch Distributed Checkpoint into
``CKPT_DIR/step_N/`` (model, optimizer, step, each rank's RNG state) and records a resurrect
manifest. On start it resumes from :func:`resurrect.checkpoint.resume_path`, which honours a
resume hint written by ``resurrect checkpoint prepare-resume``. Batches are a pure function of
the step, so an interrupted and resumed run ends with parameters bitwise equal to an
uninterrupted one. At the end rank 0 writes ``final.pt`` and ``final.sha256`` (sha256 of the
parameter bytes) into ``--out-dir``.
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import hashlib
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.nn.parallel import DistributedDataParallel

from resurrect.checkpoint import resume_path, write_manifest

STOP_ENV = "RESURRECT_TRAIN_STOP_AT_STEP"
# fault injection: on the first attempt, every rank waits after this step (and its save)
# until the file HOLD_UNTIL_ENV names exists - the moment a demo injects its fault
HOLD_ENV = "RESURRECT_TRAIN_HOLD_AFTER_STEP"
HOLD_UNTIL_ENV = "RESURRECT_TRAIN_HOLD_UNTIL"
HOLD_MAX_S = 600.0
STOP_EXIT_CODE = 17
FAIL_GPU_ENV = "RESURRECT_TRAIN_FAIL_GPU_AT_STEP"
FAIL_GPU_EVERY_ATTEMPT_ENV = "RESURRECT_TRAIN_FAIL_GPU_EVERY_ATTEMPT"
DATASET_SIZE = 4096
IN_FEATURES = 16
PATH_BYTES = 4096


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; each has an environment variable default."""
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=int(env("RESURRECT_TRAIN_STEPS", "200")))
    p.add_argument("--ckpt-every", type=int, default=int(env("RESURRECT_TRAIN_CKPT_EVERY", "20")))
    p.add_argument(
        "--sleep",
        type=float,
        default=float(env("RESURRECT_TRAIN_SLEEP", "0")),
        help="seconds to sleep per step (so a demo can kill a node mid-run)",
    )
    p.add_argument("--ckpt-dir", type=Path, default=Path(env("CKPT_DIR", "checkpoints")))
    p.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="where final.pt and final.sha256 go (default: the checkpoint dir)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=int(env("RESURRECT_TRAIN_SEED", "1234")))
    p.add_argument("--log-every", type=int, default=int(env("RESURRECT_TRAIN_LOG_EVERY", "10")))
    fail_at = env(FAIL_GPU_ENV)
    p.add_argument(
        "--fail-gpu-at-step",
        type=int,
        default=int(fail_at) if fail_at else None,
        help=f"fault injection: at this step (first attempt only) one rank reports a fatal GPU"
        f" error and hangs, as a GPU that failed would (env {FAIL_GPU_ENV})",
    )
    p.add_argument(
        "--fail-gpu-every-attempt",
        action="store_true",
        default=env(FAIL_GPU_EVERY_ATTEMPT_ENV, "") == "1",
        help="fault injection: the GPU error of --fail-gpu-at-step comes on every attempt that"
        f" reaches that step, as a job whose own code breaks its GPU would (a restart loop;"
        f" env {FAIL_GPU_EVERY_ATTEMPT_ENV}=1)",
    )
    p.add_argument(
        "--fail-gpu-rank", type=int, default=int(env("RESURRECT_TRAIN_FAIL_GPU_RANK", "1"))
    )
    p.add_argument(
        "--save-delay-s",
        type=float,
        default=float(env("RESURRECT_TRAIN_SAVE_DELAY_S", "0")),
        help="fault injection: rank 0 pauses this long in each save after writing its shards"
        " (a slow flush) while the other ranks wait in the barrier",
    )
    p.add_argument(
        "--pg-timeout-min",
        type=float,
        default=float(env("RESURRECT_TRAIN_PG_TIMEOUT_MIN", "10")),
        help="the process group's collective timeout, minutes (PyTorch's default is 10)",
    )
    stop = env(STOP_ENV)
    p.add_argument(
        "--stop-at-step",
        type=int,
        default=int(stop) if stop else None,
        help=f"exit hard after this step, as a crash would (env {STOP_ENV})",
    )
    hold = env(HOLD_ENV)
    p.add_argument(
        "--hold-after-step",
        type=int,
        default=int(hold) if hold else None,
        help=f"first attempt only: wait after this step until --hold-until exists (env {HOLD_ENV})",
    )
    p.add_argument("--hold-until", type=Path, default=env(HOLD_UNTIL_ENV) or None)
    return p.parse_args(argv)


def hold_until(path: Path, rank: int, step: int) -> None:
    """Wait (at most ``HOLD_MAX_S``) until ``path`` exists: a fault is injected meanwhile."""
    log(rank, f"holding after step {step} until {path} exists")
    deadline = time.monotonic() + HOLD_MAX_S
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


class MLP(nn.Module):
    """A small regression MLP with dropout (so the RNG state matters on resume)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(IN_FEATURES, 64),
            nn.Tanh(),
            nn.Dropout(0.1),
            nn.Linear(64, 64),
            nn.Tanh(),
            nn.Linear(64, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]


def make_dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed synthetic regression problem: y = sin(x @ w) + small noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(DATASET_SIZE, IN_FEATURES, generator=g)
    w = torch.randn(IN_FEATURES, 1, generator=g) / IN_FEATURES**0.5
    y = torch.sin(3 * x @ w) + 0.05 * torch.randn(DATASET_SIZE, 1, generator=g)
    return x, y


def batch_indices(seed: int, step: int, batch: int, rank: int, world: int) -> torch.Tensor:
    """This rank's sample indices for a step: a pure function of (seed, step), so the data
    position needs no saved iterator state."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    idx = torch.randint(0, DATASET_SIZE, (batch * world,), generator=g)
    return idx[rank * batch : (rank + 1) * batch]


def init_distributed(timeout_min: float) -> tuple[int, int]:
    """Join the torchrun group (or a one-process group when started without torchrun)."""
    if "RANK" not in os.environ:
        os.environ.update(
            RANK="0",
            WORLD_SIZE="1",
            LOCAL_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=os.environ.get("MASTER_PORT", "29555"),
        )
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=timeout_min))
    return dist.get_rank(), dist.get_world_size()


def app_state(
    model: nn.Module, optim: torch.optim.Optimizer, step: int, rank: int
) -> dict[str, Any]:
    """What a checkpoint holds. The RNG key is per rank (each rank has its own dropout RNG)."""
    model_sd, optim_sd = get_state_dict(model, optim)
    return {
        "model": model_sd,
        "optim": optim_sd,
        "step": torch.tensor(step, dtype=torch.int64),
        f"rng/rank{rank}": torch.get_rng_state(),
    }


def save_checkpoint(
    ckpt_dir: Path,
    step: int,
    model: nn.Module,
    optim: torch.optim.Optimizer,
    rank: int,
    delay_s: float = 0.0,
) -> Path:
    """DCP save into ``ckpt_dir/step_N``, then (rank 0) the resurrect manifest."""
    path = ckpt_dir / f"step_{step}"
    dcp_save(app_state(model, optim, step, rank), checkpoint_id=str(path))
    if rank == 0 and delay_s > 0:
        time.sleep(delay_s)
    dist.barrier()
    if rank == 0:
        write_manifest(path)
    dist.barrier()
    return path


def load_checkpoint(path: Path, model: nn.Module, optim: torch.optim.Optimizer, rank: int) -> int:
    """Restore model, optimizer, RNG; return the step the checkpoint was taken after."""
    state = app_state(model, optim, 0, rank)
    dcp_load(state, checkpoint_id=str(path))
    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
    torch.set_rng_state(state[f"rng/rank{rank}"])
    return int(state["step"].item())


def choose_resume(ckpt_dir: Path, rank: int) -> Path | None:
    """Rank 0 asks resurrect where to resume; every rank gets the same answer."""
    buf = torch.zeros(PATH_BYTES, dtype=torch.uint8)
    if rank == 0:
        found = resume_path(ckpt_dir)
        raw = str(found).encode() if found else b""
        if len(raw) >= PATH_BYTES:
            raise ValueError(f"checkpoint path too long: {found}")
        buf[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    dist.broadcast(buf, src=0)
    text = bytes(buf.tolist()).rstrip(b"\0").decode()
    return Path(text) if text else None


def params_sha256(model: nn.Module) -> str:
    """sha256 over the raw bytes of every parameter, in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(bytes(tensor.detach().contiguous().view(torch.uint8).flatten().tolist()))
    return digest.hexdigest()


def fail_like_a_lost_gpu() -> None:
    """Fault injection: print what NCCL prints when the GPU under a rank fails (naming this
    host), then hang, as a rank whose GPU is gone does; the other ranks block in the next
    collective until a watchdog or resurrect ends the job."""
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    pid = os.getpid()
    print(
        f"{host}:{pid}:{pid} [0] NCCL WARN Cuda failure 'uncorrectable ECC error encountered'",
        flush=True,
    )
    while True:
        time.sleep(3600)


def log(rank: int, message: str) -> None:
    """One output line; the UTC time at the end makes it a progress signal for resurrect's
    goodput accounting (``resurrect goodput``)."""
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    print(f"[rank{rank}] {message} t={now}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # When the launcher or Slurm kills us, leave every thread's stack in the log.
    faulthandler.register(signal.SIGTERM, chain=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    rank, world = init_distributed(args.pg_timeout_min)
    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    out_dir: Path = args.out_dir or args.ckpt_dir

    torch.manual_seed(args.seed)  # identical initial weights on every rank
    model = DistributedDataParallel(MLP())
    optim = torch.optim.Adam(model.parameters(), lr=args.lr)
    torch.manual_seed(args.seed + 1 + rank)  # per-rank dropout stream
    x, y = make_dataset(args.seed)

    start = 0
    resume = choose_resume(args.ckpt_dir, rank)
    if resume is not None:
        start = load_checkpoint(resume, model, optim, rank)
        log(rank, f"resumed from {resume} at step {start}")
    else:
        log(rank, "no intact checkpoint: starting from scratch")
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
    log(rank, f"world {world}, steps {start + 1}..{args.steps}, restart count {restarts}")

    loss_fn = nn.MSELoss()
    for step in range(start + 1, args.steps + 1):
        idx = batch_indices(args.seed, step, args.batch_size, rank, world)
        optim.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        optim.step()
        # the first step of every attempt is logged too: it ends the attempt's start-up
        if step % args.log_every == 0 or step == args.steps or step == start + 1:
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            log(rank, f"step {step}/{args.steps} loss {mean.item() / world:.4f}")
        if step % args.ckpt_every == 0:
            path = save_checkpoint(args.ckpt_dir, step, model, optim, rank, args.save_delay_s)
            log(rank, f"checkpoint {path}")
        if args.hold_after_step == step and args.hold_until is not None and restarts == "0":
            hold_until(args.hold_until, rank, step)
        if args.stop_at_step is not None and step == args.stop_at_step:
            dist.barrier()
            log(rank, f"stopping hard after step {step} ({STOP_ENV})")
            sys.stdout.flush()
            os._exit(STOP_EXIT_CODE)
        if (
            args.fail_gpu_at_step == step
            and rank == args.fail_gpu_rank
            and (args.fail_gpu_every_attempt or restarts == "0")
        ):
            fail_like_a_lost_gpu()
        if args.sleep > 0:
            time.sleep(args.sleep)

    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), out_dir / "final.pt")
        sha = params_sha256(model.module)
        (out_dir / "final.sha256").write_text(sha + "\n")
        log(rank, f"done: final params sha256 {sha}")
    dist.barrier()
    # Leave without Python teardown: freeing the DDP reducer runs ProcessGroupGloo's
    # destructor, which joins a gloo thread that may be waiting for the GIL the main thread
    # holds (a teardown deadlock seen with torch 2.13 gloo). Everything is written by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
