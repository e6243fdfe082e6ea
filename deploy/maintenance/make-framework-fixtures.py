#!/usr/bin/env python3
"""Regenerate tests/fixtures/checkpoints/frameworks/: real saves by the real libraries.

Run by hand (never by the suite), in a venv that has the libraries, e.g.::

    python3 -m venv /work/cache-fw/venv
    /work/cache-fw/venv/bin/pip install torch transformers accelerate safetensors \\
        lightning torchtitan megatron-core
    DS_BUILD_OPS=0 /work/cache-fw/venv/bin/pip install deepspeed
    /work/cache-fw/venv/bin/python deploy/maintenance/make-framework-fixtures.py

Each framework runs in its own process on CPU (gloo, world size 1 or 2, a model of a few
dozen parameters) and saves three checkpoints into ``OUT/<framework>/``, exactly where
and how the framework saves them during training; ``OUT/<framework>/PROVENANCE.json``
records the library versions and how the save was made.

``--check-resume`` closes the loop with the real libraries: it tears the newest save of
each fixture, runs resurrect's ``prepare-resume`` (``--resurrect-python``, the project's
venv), then lets the library resume the way a restarted job does and prints ``PASS`` when
it loaded the checkpoint before the torn one. The suite copies a fixture,
damages its newest checkpoint and checks what resurrect does (tests/checkpoint/
test_frameworks.py); it needs none of these libraries.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
DEFAULT_OUT = HERE.parents[2] / "tests" / "fixtures" / "checkpoints" / "frameworks"
STEPS = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _versions(*dists: str) -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for dist in ("torch", *dists):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def _provenance(root: Path, how: str, *dists: str) -> None:
    doc = {"made_by": how, "versions": _versions(*dists), "script": HERE.name}
    (root / "PROVENANCE.json").write_text(json.dumps(doc, indent=1) + "\n")


def _single_process_env(world: int = 1, rank: int = 0) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=os.environ.get("MASTER_PORT", str(_free_port())),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        CUDA_VISIBLE_DEVICES="",
    )


# ----------------------------------------------------------------------- Hugging Face
def make_hf_trainer(root: Path) -> None:
    """transformers.Trainer, a 1-layer GPT-2 of width 8, save_steps=1: checkpoint-1..3."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8)
    model = GPT2LMHeadModel(config)
    rows = [{"input_ids": torch.arange(8) % 16, "labels": torch.arange(8) % 16}] * 8
    args = TrainingArguments(
        output_dir=str(root),
        max_steps=STEPS,
        save_steps=1,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
        disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=rows).train()
    _provenance(root, "transformers.Trainer.train(), save_steps=1", "transformers", "safetensors")


# ---------------------------------------------------------------------------- Lightning
def _lightning_run(root: Path, save_last: bool | str, max_steps: int) -> tuple[Any, Any, Any]:
    """(trainer, module, data) of the tiny Lightning run: ModelCheckpoint(every_n_train_steps=1,
    save_top_k=-1, save_last=save_last) into ``root``, on the CPU."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch: torch.Tensor, _idx: int) -> torch.Tensor:
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=2)
    ckpt = ModelCheckpoint(
        dirpath=str(root), every_n_train_steps=1, save_top_k=-1, save_last=save_last
    )
    trainer = L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ckpt],
    )
    return trainer, Tiny(), data


def make_lightning(root: Path, save_last: bool | str) -> None:
    """lightning.Trainer with ModelCheckpoint(every_n_train_steps=1, save_top_k=-1)."""
    trainer, model, data = _lightning_run(root, save_last, STEPS)
    trainer.fit(model, data)
    _provenance(
        root,
        f"lightning.Trainer.fit(), ModelCheckpoint(every_n_train_steps=1, save_top_k=-1, "
        f"save_last={save_last!r})",
        "lightning",
    )


# ---------------------------------------------------------------------------- DeepSpeed
def _deepspeed_rank(rank: int, world: int, root: str, port: int) -> None:
    _single_process_env(world, rank)
    os.environ.update(MASTER_PORT=str(port), DS_ACCELERATOR="cpu")
    import deepspeed
    import torch

    # DeepSpeed's shared-memory all-reduce op is a C++ extension built on first use; it
    # is only a speed-up of gloo collectives and needs a compiler: skip it.
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,
    }
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    for _step in range(STEPS):
        loss = engine(torch.randn(2, 4)).pow(2).mean()
        engine.backward(loss)
        engine.step()
        engine.save_checkpoint(root)  # global_stepN/ and `latest`


def make_deepspeed(root: Path, world: int = 2) -> None:
    """deepspeed.initialize (ZeRO stage 1, CPU accelerator, gloo, 2 ranks) and
    engine.save_checkpoint after each of three steps."""
    import torch.multiprocessing as mp

    mp.spawn(_deepspeed_rank, args=(world, str(root), _free_port()), nprocs=world)
    # DeepSpeed copies its conversion scripts (zero_to_fp32.py ...) into the root: code,
    # not checkpoint data, and not ours to ship.
    for script in root.glob("zero_to_*.py"):
        script.unlink()
    _provenance(
        root,
        f"deepspeed.initialize(ZeRO stage 1, DS_ACCELERATOR=cpu, gloo, {world} ranks), "
        "engine.save_checkpoint(root) after each step (its zero_to_*.py scripts removed)",
        "deepspeed",
    )


# ----------------------------------------------------------------------------- Megatron
def make_megatron_torch_dist(root: Path) -> None:
    """megatron.core.dist_checkpointing.save (torch_dist backend) into iter_NNNNNNN/, then
    the tracker, as megatron/training/checkpointing.py's save_checkpoint does."""
    _single_process_env()
    import torch
    import torch.distributed as dist
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor

    # Its torch_dist writer calls torch.cuda.synchronize() before writing and puts its
    # failure flag on torch.cuda.current_device() to broadcast it; on a CPU build there is
    # nothing to wait for and the flag lives on the CPU (gloo broadcasts CPU tensors).
    torch.cuda.synchronize = lambda *_args, **_kwargs: None
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    weight = torch.randn(4, 2)
    for iteration in range(1, STEPS + 1):
        weight += 0.1
        state = {
            "checkpoint_version": 3.0,
            "iteration": iteration,
            "model": {
                "decoder.weight": ShardedTensor.from_rank_offsets(
                    "decoder.weight", weight.clone(), replica_id=0
                ),
            },
            "rng_state": [{"random_rng_state": torch.get_rng_state()}],
        }
        folder = root / f"iter_{iteration:07d}"
        folder.mkdir(parents=True)
        dist_checkpointing.save(state, str(folder))
        dist.barrier()
        (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    dist.destroy_process_group()
    _provenance(
        root,
        "megatron.core.dist_checkpointing.save(sharded state dict, iter_NNNNNNN/) with the "
        "default torch_dist strategy (gloo, 1 rank; torch.cuda.synchronize made a no-op on "
        "this CPU build, torch.cuda.current_device() answering 'cpu'); the iter_ folder name and "
        "latest_checkpointed_iteration.txt written by this script the way Megatron-LM's "
        "training/checkpointing.py names and writes them (that module is not in megatron-core)",
        "megatron-core",
    )


# --------------------------------------------------------------------------- torchtitan
def _torchtitan_run(root: Path, **manager_config: Any) -> tuple[Any, Any, Any, Any]:
    """In a 1-rank gloo group: a Linear(4, 2) model, torchtitan's own optimizer and
    scheduler containers, and its CheckpointManager (DCP, interval 1) on ``root``
    (``manager_config``: more of its settings). Returns (model, optimizers, schedulers,
    manager)."""
    _single_process_env()
    import torch
    import torch.distributed as dist
    from torchtitan.components.checkpointer.dcp import CheckpointManager
    from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer
    from torchtitan.components.optimizer.optimizer import OptimizersContainer, ParamGroupConfig

    dist.init_process_group("gloo")
    model = torch.nn.Linear(4, 2)
    optimizers = OptimizersContainer(
        OptimizersContainer.Config(
            param_groups=[ParamGroupConfig(pattern=".*", optimizer_name="AdamW")],
            implementation="for-loop",
        ),
        model_parts=[model],
    )
    schedulers = LRSchedulersContainer.Config(warmup_steps=1).build(
        optimizers=optimizers, training_steps=STEPS
    )
    manager = CheckpointManager(
        CheckpointManager.Config(
            enable=True, folder=".", interval=1, keep_latest_k=0, **manager_config
        ),
        dataloader=None,
        model_parts=[model],
        optimizers=optimizers,
        lr_schedulers=schedulers,
        states={},
        sd_adapter=None,
        base_folder=str(root),
    )
    return model, optimizers, schedulers, manager


def make_torchtitan(root: Path) -> None:
    """torchtitan's CheckpointManager (DCP, interval 1) saving steps 1..3 of a tiny model."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    model, optimizers, schedulers, manager = _torchtitan_run(root, last_save_model_only=False)
    for step in range(1, STEPS + 1):
        model(torch.randn(2, 4)).pow(2).mean().backward()
        optimizers.step()
        schedulers.step()
        optimizers.zero_grad()
        manager.save(curr_step=step)
    manager.close()  # waits for its purge thread
    dist.destroy_process_group()
    _provenance(
        root,
        "torchtitan CheckpointManager(interval=1, folder='.').save(step) for steps 1..3 "
        "(gloo, 1 rank), a Linear(4, 2) model with torchtitan's own optimizer and "
        "scheduler containers",
        "torchtitan",
    )


FRAMEWORKS: dict[str, Callable[[Path], None]] = {
    "deepspeed": make_deepspeed,
    "megatron_torch_dist": make_megatron_torch_dist,
    "torchtitan": make_torchtitan,
    "hf_trainer": make_hf_trainer,
    "lightning_copy": lambda root: make_lightning(root, True),
    "lightning_link": lambda root: make_lightning(root, "link"),
}


# ------------------------------------------------------ the libraries resume, after resurrect
#: What a crash in the newest save tears (relative to the root), and the checkpoint the
#: framework must load once resurrect prepared the resume.
TORN: dict[str, tuple[list[str], str]] = {
    "deepspeed": (["global_step3/mp_rank_00_model_states.pt"], "global_step2"),
    "megatron_torch_dist": (["iter_0000003/common.pt"], "iter_0000002"),
    "hf_trainer": (["checkpoint-3/model.safetensors"], "checkpoint-2"),
    "torchtitan": (["step-3/__0_0.distcp"], "step-2"),
    "lightning_link": (["epoch=0-step=3.ckpt"], "epoch=0-step=2.ckpt"),
    "lightning_copy": (["epoch=0-step=3.ckpt", "last.ckpt"], "epoch=0-step=2.ckpt"),
}


def resume_deepspeed(root: Path) -> str:
    _single_process_env()
    os.environ["DS_ACCELERATOR"] = "cpu"
    import deepspeed
    import torch

    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Linear(4, 2)
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,
    }
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    # The fixture has 2 ZeRO ranks, this load 1: the model states only.
    path, _state = engine.load_checkpoint(str(root), load_optimizer_states=False)
    return Path(path).parent.name if path else "nothing"


def resume_megatron_torch_dist(root: Path) -> str:
    _single_process_env()
    import torch
    import torch.distributed as dist
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor

    torch.cuda.synchronize = lambda *_args, **_kwargs: None
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    dist.init_process_group("gloo")
    iteration = int((root / "latest_checkpointed_iteration.txt").read_text())
    folder = root / f"iter_{iteration:07d}"
    template = {
        "model": {
            "decoder.weight": ShardedTensor.from_rank_offsets(
                "decoder.weight", torch.empty(4, 2), replica_id=0
            )
        }
    }
    dist_checkpointing.load(template, str(folder))
    dist.destroy_process_group()
    return folder.name


def resume_hf_trainer(root: Path) -> str:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(root))
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8)
    rows = [{"input_ids": torch.arange(8) % 16, "labels": torch.arange(8) % 16}] * 8
    args = TrainingArguments(
        output_dir=str(root),
        max_steps=STEPS + 1,
        save_steps=100,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=rows).train(
        resume_from_checkpoint=True
    )
    return Path(last).name if last else "nothing"


def resume_torchtitan(root: Path) -> str:
    import torch.distributed as dist

    _, _, _, manager = _torchtitan_run(root)
    step = manager._find_load_step()  # what manager.load() loads
    manager.load()
    manager.close()
    dist.destroy_process_group()
    return f"step-{step}"


def resume_lightning(root: Path, save_last: bool | str) -> str:
    trainer, model, data = _lightning_run(root, save_last, STEPS + 1)
    loaded = root / "last.ckpt"
    target = os.readlink(loaded) if loaded.is_symlink() else loaded.name
    trainer.fit(model, data, ckpt_path="last")
    return Path(target).name


RESUMES: dict[str, Callable[[Path], str]] = {
    "deepspeed": resume_deepspeed,
    "megatron_torch_dist": resume_megatron_torch_dist,
    "hf_trainer": resume_hf_trainer,
    "torchtitan": resume_torchtitan,
    "lightning_copy": lambda root: resume_lightning(root, True),
    "lightning_link": lambda root: resume_lightning(root, "link"),
}


def check_resume(name: str, fixtures: Path, resurrect_python: str) -> bool:
    """Tear the fixture's newest save, let resurrect prepare the resume, and have the
    library itself resume: True when it loads the checkpoint before the torn one."""
    torn, expected = TORN[name]
    with tempfile.TemporaryDirectory(prefix="resume-check-") as tmp:
        root = Path(tmp) / name
        shutil.copytree(fixtures / name, root, symlinks=True)
        for rel in torn:
            os.truncate(root / rel, (root / rel).stat().st_size // 2)
        env = {**os.environ, "PYTHONPATH": str(HERE.parents[2])}
        prepared = subprocess.run(
            [resurrect_python, "-m", "resurrect.checkpoint", "prepare-resume", str(root)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        print(
            prepared.stdout.strip().splitlines()[-1] if prepared.stdout.strip() else prepared.stderr
        )
        cmd = [sys.executable, str(HERE), "--out", tmp, "--resume-one", name]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        loaded = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    ok = loaded == f"loaded {expected}"
    print(f"{'PASS' if ok else 'FAIL'} {name}: {loaded} (expected {expected})", flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", nargs="*", choices=sorted(FRAMEWORKS), default=None)
    parser.add_argument(
        "--check-resume",
        action="store_true",
        help="instead of saving: tear each fixture's newest save, run resurrect's "
        "prepare-resume, and have the library resume (prints PASS/FAIL per framework)",
    )
    parser.add_argument(
        "--resurrect-python",
        default=str(HERE.parents[2] / ".venv" / "bin" / "python"),
        help="the Python that runs resurrect (its venv)",
    )
    parser.add_argument("--one", choices=sorted(FRAMEWORKS), help=argparse.SUPPRESS)
    parser.add_argument("--resume-one", choices=sorted(RESUMES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        root = args.out / args.one
        FRAMEWORKS[args.one](root)
        return 0
    if args.resume_one:
        loaded = RESUMES[args.resume_one](args.out / args.resume_one)
        print(f"loaded {loaded}", flush=True)
        return 0
    if args.check_resume:
        names = args.only or sorted(FRAMEWORKS)
        results = [check_resume(n, args.out, args.resurrect_python) for n in names]
        return 0 if all(results) else 1
    failed = []
    for name in args.only or sorted(FRAMEWORKS):
        root = args.out / name
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        print(f"== {name}", flush=True)
        env = {**os.environ, "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false"}
        cmd = [sys.executable, str(HERE), "--out", str(args.out), "--one", name]
        if subprocess.run(cmd, env=env, check=False).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
