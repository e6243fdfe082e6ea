"""Write one PyTorch version's checkpoint fixtures (run by torch_matrix.py inside a venv).

Runs under the torch being tested, with nothing of resurrect imported:

    python torch_fixture_writer.py OUT_DIR

writes ``OUT_DIR/step_1/`` (a DCP checkpoint saved by two gloo ranks on CPU, or by a world
of one where two ranks fail), ``OUT_DIR/step_2.pt`` (a ``torch.save`` file) and
``OUT_DIR/written-by.json`` (the versions and how the DCP save was made). Tensors are tiny
and seeded, so each fixture stays a few KB.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _state(rank: int, world: int) -> tuple[dict[str, Any], list[str]]:
    """Small tensors of several dtypes, a sharded DTensor where available, non-tensor items."""
    g = torch.Generator().manual_seed(1234)
    notes: list[str] = []
    state: dict[str, Any] = {
        "model": {
            "weight": torch.randn(8, 4, generator=g),
            "bias": torch.randn(4, generator=g).to(torch.bfloat16),
            "mask": torch.arange(6, dtype=torch.int64) % 2 == 0,
        },
        "optim": {"step": 7, "param_groups": [{"lr": 0.001, "name": "all"}]},
        f"rank{rank}.local": torch.full((3,), float(rank), dtype=torch.float16),
        "extra": {"note": "tiny fixture", "epoch": 1},
    }
    if world > 1:
        dtensor = _sharded_dtensor(world, g)
        if dtensor is not None:
            state["model"]["sharded"] = dtensor
            notes.append("a DTensor sharded over both ranks")
    return state, notes


def _sharded_dtensor(world: int, g: torch.Generator) -> Any:
    try:
        from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh
    except ImportError:
        try:
            from torch.distributed._tensor import Shard, distribute_tensor, init_device_mesh
        except ImportError:
            return None
    mesh = init_device_mesh("cpu", (world,))
    return distribute_tensor(torch.randn(4 * world, 2, generator=g), mesh, [Shard(0)])


def _save_dcp(state: dict[str, Any], path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    writer = dcp.FileSystemWriter(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(dcp, "save"):
            dcp.save(state, storage_writer=writer)
        else:
            dcp.save_state_dict(state, storage_writer=writer)


def _rank_main(rank: int, world: int, init_file: str, out: str, notes_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        state, notes = _state(rank, world)
        _save_dcp(state, Path(out))
        dist.barrier()
        if rank == 0:
            Path(notes_file).write_text(json.dumps(notes))
    finally:
        dist.destroy_process_group()


def _free_file(tmp: Path, name: str) -> str:
    path = tmp / name
    path.unlink(missing_ok=True)
    return str(path)


def write_dcp(out: Path, tmp: Path) -> dict[str, Any]:
    """Save with two gloo ranks; fall back to a world of one; say which worked."""
    errors: list[str] = []
    for world in (2, 1):
        shutil.rmtree(out, ignore_errors=True)
        notes_file = tmp / "notes.json"
        try:
            mp.spawn(
                _rank_main,
                args=(world, _free_file(tmp, f"init-{world}"), str(out), str(notes_file)),
                nprocs=world,
                join=True,
            )
            return {
                "world_size": world,
                "notes": json.loads(notes_file.read_text()),
                "errors": errors,
            }
        except Exception as exc:  # record and try the next world size
            errors.append(f"world {world}: {type(exc).__name__}: {str(exc)[-400:]}")
    raise RuntimeError("; ".join(errors))


def write_torch_save(path: Path) -> None:
    g = torch.Generator().manual_seed(99)
    torch.save(
        {
            "model": {"weight": torch.randn(8, 4, generator=g), "bias": torch.zeros(4)},
            "step": 2,
            "note": "tiny fixture",
        },
        path,
    )


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(f"usage: {Path(sys.argv[0]).name} OUT_DIR\n\n{__doc__}")
        return 0 if sys.argv[1:] in (["-h"], ["--help"]) else 2
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            dcp_info = write_dcp(out / "step_1", Path(tmp))
        except Exception:
            traceback.print_exc()
            return 1
    write_torch_save(out / "step_2.pt")
    info = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "dcp_world_size": dcp_info["world_size"],
        "dcp_notes": dcp_info["notes"],
        "dcp_errors": dcp_info["errors"],
    }
    (out / "written-by.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(60)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
