"""Real checkpoints made by torch for the checkpoint tests, ways to damage them, and what
their pickles import."""

from __future__ import annotations

import io
import os
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save

from resurrect.untrusted.plain_pickle import Rules, load_with


def state(seed: int) -> dict[str, object]:
    """A small state dict: several tensors and a non-tensor value."""
    g = torch.Generator().manual_seed(seed)
    return {
        "model.weight": torch.randn(64, 32, generator=g),
        "model.bias": torch.randn(32, generator=g),
        "optim.exp_avg": torch.randn(64, 32, generator=g),
        "step": seed,
    }


def make_dcp(path: Path, seed: int = 0, *, shards: int = 3) -> Path:
    """A real DCP checkpoint written by torch (single process, ``shards`` storage files)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save(state(seed), storage_writer=FileSystemWriter(str(path), thread_count=shards))
    return path


def make_torch_save(path: Path, seed: int = 0) -> Path:
    """A real single-file torch.save checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state(seed), path)
    return path


def shard_files(ckpt: Path) -> list[Path]:
    """The DCP storage files of a checkpoint, largest first."""
    return sorted(ckpt.glob("*.distcp"), key=lambda p: -p.stat().st_size)


def truncate(path: Path, keep_fraction: float = 0.5) -> None:
    """Cut a file short, as an interrupted write would."""
    size = path.stat().st_size
    os.truncate(path, int(size * keep_fraction))


def flip_byte_in_tensor_data(archive_path: Path, archive_offset: int = 0) -> None:
    """Flip one byte inside the data of the largest zip member (same size, bad content)."""
    with zipfile.ZipFile(archive_path) as zf:
        infos = zf.infolist()
    # Only meaningful for whole-file archives; DCP shards are handled by flip_byte_at.
    target = max(infos, key=lambda i: i.compress_size)
    with open(archive_path, "r+b") as fh:
        fh.seek(archive_offset + target.header_offset + 26)
        name_len = int.from_bytes(fh.read(2), "little")
        extra_len = int.from_bytes(fh.read(2), "little")
        data_start = archive_offset + target.header_offset + 30 + name_len + extra_len
        flip_byte_at(archive_path, data_start + target.compress_size // 2)


def flip_byte_at(path: Path, offset: int) -> None:
    """Invert the bits of the byte at ``offset``."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        old = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([old[0] ^ 0xFF]))


def tree_snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under root (following nothing) -> (size, content); to prove nothing is lost."""
    out: dict[str, tuple[int, bytes]] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if p.is_symlink():
                continue
            data = p.read_bytes()
            out[str(p.relative_to(root))] = (len(data), data)
    return out


def contents(snapshot: dict[str, tuple[int, bytes]]) -> list[bytes]:
    """The file contents of a snapshot, sorted: equal lists mean no data lost (moves allowed)."""
    return sorted(data for _size, data in snapshot.values())


def globals_named(data: bytes, rules: type[Rules] | None = None) -> set[tuple[str, str]]:
    """The (module, name) pairs the pickle ``data`` imports: each looked up by ``rules`` in
    the linear pickle machine (which fails on a pair they lack), or without ``rules`` by
    Python's unpickler (only for torch's own, trusted output)."""
    found: set[tuple[str, str]] = set()
    if rules is None:

        class Recording(pickle.Unpickler):
            def find_class(self, module: str, name: str) -> Any:
                found.add((module, name))
                return super().find_class(module, name)

        Recording(io.BytesIO(data)).load()
        return found

    class RecordingRules(rules):  # type: ignore[misc, valid-type]
        def find_global(self, module: str, name: str) -> object:
            found.add((module, name))
            return super().find_global(module, name)

    load_with(data, RecordingRules())
    return found
