"""PyTorch Distributed Checkpoint (DCP) directories.

A DCP directory holds ``.metadata`` (a pickled ``torch.distributed.checkpoint.metadata.Metadata``)
and the storage files it references (``storage_data``: index -> ``_StorageInfo(relative_path,
offset, length)``). The metadata is unpickled with an allow-list unpickler first, so a garbled
or hostile file cannot run code; only then may torch's own reader read it.
"""

from __future__ import annotations

import enum
import io
import os
import pathlib
import pickle
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resurrect.checkpoint.fsutil import describe_oserror

METADATA_NAME = ".metadata"
SHARD_SUFFIX = ".distcp"
_DCP_MODULE_PREFIX = "torch.distributed.checkpoint."
_PATH_TYPES = {"Path", "PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"}
_MAX_METADATA_BYTES = 1 << 30


class MetadataError(Exception):
    """``.metadata`` is missing, unreadable or not a DCP Metadata object."""


@dataclass(frozen=True)
class StorageRef:
    """One byte range of one storage file that the metadata references."""

    relative_path: str
    offset: int
    length: int
    transformed: bool


def _enum_member(owner: Any, name: str) -> Any:
    """The only use of ``getattr`` we let a pickle make: naming a member of one of DCP's own
    enums (some Python versions pickle enum members as ``getattr(EnumClass, "NAME")``)."""
    if (
        isinstance(owner, type)
        and issubclass(owner, enum.Enum)
        and owner.__module__.startswith(_DCP_MODULE_PREFIX)
        and name in owner.__members__
    ):
        return owner[name]
    raise pickle.UnpicklingError(f"disallowed getattr({owner!r}, {name!r})")


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles only DCP's own classes and a few harmless torch/stdlib types."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith(_DCP_MODULE_PREFIX):
            obj = super().find_class(module, name)
            if isinstance(obj, type):
                return obj
        elif module == "torch":
            import torch

            obj = getattr(torch, name, None)
            if obj is torch.Size or isinstance(
                obj, torch.dtype | torch.layout | torch.memory_format
            ):
                return obj
        elif module == "torch.serialization" and name == "_get_layout":
            return super().find_class(module, name)  # a name -> torch.layout lookup
        elif module == "pathlib" and name in _PATH_TYPES:
            return getattr(pathlib, name)
        elif module == "collections" and name == "OrderedDict":
            return OrderedDict
        elif module == "builtins" and name in {"set", "frozenset", "complex", "slice"}:
            return super().find_class(module, name)
        elif module == "builtins" and name == "getattr":
            return _enum_member
        raise pickle.UnpicklingError(f"disallowed global {module}.{name}")


def load_metadata_safely(ckpt: Path) -> Any:
    """Unpickle ``ckpt/.metadata`` with the allow-list unpickler; raise MetadataError."""
    meta_path = ckpt / METADATA_NAME
    try:
        size = meta_path.stat().st_size
        if size == 0:
            raise MetadataError(".metadata is a zero-byte file")
        if size > _MAX_METADATA_BYTES:
            raise MetadataError(f".metadata is implausibly large ({size} bytes)")
        data = meta_path.read_bytes()
    except OSError as exc:
        raise MetadataError(f".metadata unreadable ({describe_oserror(exc)})") from exc
    try:
        meta = _RestrictedUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # any unpickling failure means a garbled file
        raise MetadataError(f".metadata garbled ({type(exc).__name__}: {exc})") from exc
    if type(meta).__name__ != "Metadata" or not hasattr(meta, "storage_data"):
        raise MetadataError(f".metadata holds a {type(meta).__name__}, not a DCP Metadata")
    return meta


def load_metadata_with_torch(ckpt: Path) -> Any:
    """Read the metadata with torch's own ``FileSystemReader`` (after the safe check)."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    try:
        return FileSystemReader(str(ckpt)).read_metadata()
    except Exception as exc:  # torch raises many types here
        raise MetadataError(f"torch cannot read .metadata ({type(exc).__name__}: {exc})") from exc


def storage_refs(meta: Any) -> list[StorageRef]:
    """Every byte range that the metadata says exists; raise MetadataError if malformed."""
    storage = getattr(meta, "storage_data", None)
    if not isinstance(storage, dict):
        raise MetadataError(".metadata has no storage_data map")
    refs: list[StorageRef] = []
    for info in storage.values():
        rel = getattr(info, "relative_path", None)
        offset = getattr(info, "offset", None)
        length = getattr(info, "length", None)
        if not isinstance(rel, str) or not isinstance(offset, int) or not isinstance(length, int):
            raise MetadataError(f".metadata has a malformed storage entry: {info!r}")
        if offset < 0 or length < 0 or os.path.isabs(rel) or ".." in Path(rel).parts:
            raise MetadataError(f".metadata has an invalid storage entry: {info!r}")
        transformed = bool(getattr(info, "transform_descriptors", None))
        refs.append(StorageRef(rel, offset, length, transformed))
    return refs


def required_sizes(refs: list[StorageRef]) -> dict[str, int]:
    """For each referenced file, the smallest size that covers all its ranges."""
    need: dict[str, int] = {}
    for ref in refs:
        need[ref.relative_path] = max(need.get(ref.relative_path, 0), ref.offset + ref.length)
    return need


def check_items(
    path: Path, refs: list[StorageRef], on_bytes: Callable[[int], None] | None = None
) -> str | None:
    """Full check of one storage file: each untransformed item is a torch.save zip with good
    CRCs. Returns the first problem, or None."""
    from resurrect.checkpoint.zipcheck import ZipDamage, check_archive

    for ref in sorted(refs, key=lambda r: r.offset):
        if ref.transformed or ref.length == 0:
            continue
        try:
            check_archive(path, offset=ref.offset, length=ref.length, full=True, on_bytes=on_bytes)
        except ZipDamage as exc:
            return f"{ref.relative_path} @ {ref.offset}: {exc}"
        except OSError as exc:
            return f"{ref.relative_path}: {describe_oserror(exc)}"
    return None
