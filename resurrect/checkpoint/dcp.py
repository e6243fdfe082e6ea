"""PyTorch Distributed Checkpoint (DCP) directories.

A DCP directory holds ``.metadata`` (a pickled ``torch.distributed.checkpoint.metadata.Metadata``)
and the storage files it references (``storage_data``: index -> ``_StorageInfo(relative_path,
offset, length)``).

The metadata is hostile input, so it is never handed to torch or to Python's unpickler. It
is read once (``O_NOFOLLOW``, regular file, size-capped) and the bytes are read by the
linear pickle machine of :mod:`resurrect.untrusted.plain_pickle` under
:class:`AllowListRules`: every global must be one exact ``(module, name)`` pair of
:data:`ALLOWED_GLOBALS` (no prefixes, no dotted names), and each pair builds an inert
stand-in (:class:`Record`, :class:`TorchName`, ...) instead of torch's own class, so
unpickling runs no torch code, needs no torch installed, and cannot reach anything else.
The only ``getattr`` a pickle may make names a member of DCP's memory-format enum, which
may also be called with a member's value. Dict keys and set members are strings or
stand-ins (the format has no others), so no file can make building them quadratic, and a
parse stops after :data:`METADATA_CPU_S` CPU seconds: metadata too costly to read is not
judged (:class:`UnsupportedMetadata` without storage references), in seconds.

Metadata that the allow-list refuses is read a second time under :class:`InertRules`, in
which every global of a ``torch`` module becomes an inert record that accepts any
arguments (still nothing runs). If that yields a DCP Metadata, the file is intact as a
pickle and was written by a PyTorch that resurrect does not know: :class:`UnsupportedMetadata`
(the checkpoint is not judged, and its storage references still allow the size and CRC
checks). Otherwise the file is garbled or hostile: :class:`MetadataError`.
"""

from __future__ import annotations

import os
import pickle
import reprlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PosixPath, PurePosixPath
from typing import Any

from resurrect.checkpoint.fsutil import describe_oserror, read_capped
from resurrect.checkpoint.limits import DEFAULT_LIMITS, VerifyLimits
from resurrect.untrusted.plain_pickle import PickleTooCostly, PlainPickleError, Rules, load_with

METADATA_NAME = ".metadata"
SHARD_SUFFIX = ".distcp"
#: Real metadata of a model with a million tensors stays well below this.
MAX_METADATA_BYTES = 256 << 20


class MetadataError(Exception):
    """``.metadata`` is missing, unreadable or not a DCP Metadata object."""


class UnsupportedMetadata(MetadataError):
    """``.metadata`` is an intact pickle of a DCP Metadata that names globals, or uses
    shapes, of a PyTorch resurrect does not know: the checkpoint cannot be judged.

    ``refs`` are the storage references read from the inert parse (None where even they
    were not readable), so the structural checks can still run.
    """

    def __init__(self, message: str, refs: list[StorageRef] | None) -> None:
        super().__init__(message)
        self.refs = refs


@dataclass(frozen=True)
class StorageRef:
    """One byte range of one storage file that the metadata references."""

    relative_path: str
    offset: int
    length: int
    transformed: bool


class Record:
    """An inert stand-in for one of DCP's dataclasses: attributes only, no behaviour.

    ``kind`` is the class name the pickle asked for. Pickles build dataclasses with
    ``cls.__new__(cls)`` then ``__setstate__``/``__dict__`` update; TensorProperties
    pickles its fields as a tuple, kept as ``state``.
    """

    kind = "Record"

    def __setstate__(self, state: object) -> None:
        slots: object = None
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state, slots = state
        if isinstance(state, dict):
            self.__dict__.update({k: v for k, v in state.items() if isinstance(k, str)})
        elif state is not None:
            self.__dict__["state"] = state
        if isinstance(slots, dict):
            self.__dict__.update({k: v for k, v in slots.items() if isinstance(k, str)})

    def __repr__(self) -> str:
        """Bounded, whatever the pickle built (shared or cyclic structures included)."""
        fields = ", ".join(
            f"{k[:40]}={_brief(v) if _plain(v) else type(v).__name__}"
            for k, v in list(self.__dict__.items())[:6]
        )
        return f"{self.kind}({fields})"


def _plain(value: object) -> bool:
    return value is None or type(value) in (bool, int, float, str, TorchName)


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel = 2
_BRIEF.maxstring = 80
_BRIEF.maxother = 80


def _brief(value: object) -> str:
    """A short repr of a hostile value (bounded in time and length)."""
    if isinstance(value, Record):
        return repr(value)
    return _BRIEF.repr(value)


def _record_class(name: str) -> type[Record]:
    return type(name, (Record,), {"kind": name})


class TorchName(str):
    """A torch dtype, layout or memory format, kept as its name (``"torch.float32"``)."""


class TorchSize(tuple[int, ...]):
    """``torch.Size``: a tuple of ints."""

    def __new__(cls, dims: object = ()) -> TorchSize:
        if not isinstance(dims, tuple | list) or not all(type(d) is int for d in dims):
            raise pickle.UnpicklingError(f"torch.Size of non-integers: {_brief(dims)}")
        return super().__new__(cls, dims)


class EnumStandIn:
    """One of DCP's enums, as its member names. A pickle reaches a member by value
    (``Enum(0)``: CPython 3.10, 3.12+ and later 3.11 releases) or by name
    (``getattr(Enum, "NAME")``: early 3.11 releases such as 3.11.2); either gives the name."""

    def __init__(self, name: str, members: dict[str, int]) -> None:
        self.name = name
        self.by_value = {value: member for member, value in members.items()}
        self.MEMBERS = frozenset(members)

    def __call__(self, value: object) -> TorchName:
        if type(value) is int and value in self.by_value:
            return TorchName(self.by_value[value])
        raise pickle.UnpicklingError(f"{self.name} has no member of value {_brief(value)}")

    def __repr__(self) -> str:
        return self.name


_MEMORY_FORMATS = {
    "TORCH_CONTIGUOUS_FORMAT": 0,
    "TORCH_CHANNELS_LAST": 1,
    "TORCH_PRESERVE_FORMAT": 2,
}
#: DCP's ``_MEM_FORMAT_ENCODING`` (torch.distributed.checkpoint.metadata, torch >= 2.3).
MemoryFormatEncoding = EnumStandIn("_MEM_FORMAT_ENCODING", _MEMORY_FORMATS)
#: ShardedTensor's ``MEM_FORMAT_ENCODING``, the same members (what DCP pickled up to 2.2).
ShardedMemoryFormatEncoding = EnumStandIn("MEM_FORMAT_ENCODING", _MEMORY_FORMATS)
#: DCP's planner's ``WriteItemType``, in the save plans Megatron's ``torch_dist`` keeps.
WriteItemType = EnumStandIn("WriteItemType", {"TENSOR": 1, "SHARD": 2, "BYTE_IO": 3})


def _enum_member(owner: object, name: object) -> TorchName:
    """The only ``getattr`` a pickle may make: a member of an allowed enum."""
    if isinstance(owner, EnumStandIn) and isinstance(name, str) and name in owner.MEMBERS:
        return TorchName(name)
    raise pickle.UnpicklingError(f"disallowed getattr({_brief(owner)}, {_brief(name)})")


_LAYOUTS = frozenset(
    f"torch.{n}"
    for n in "strided sparse_coo sparse_csr sparse_csc sparse_bsr sparse_bsc _mkldnn jagged".split()
)


def _get_layout(name: object) -> TorchName:
    """``torch.serialization._get_layout("torch.strided")``: a name from a fixed set."""
    if isinstance(name, str) and name in _LAYOUTS:
        return TorchName(name)
    raise pickle.UnpicklingError(f"unknown torch layout {_brief(name)}")


_DTYPES = (
    "bfloat16 bool cdouble cfloat chalf complex128 complex32 complex64 double float float16 "
    "float32 float64 half int int16 int32 int64 int8 long short uint8 uint16 uint32 uint64 "
    "qint32 qint8 quint8 quint4x2 quint2x4 float8_e4m3fn float8_e4m3fnuz float8_e5m2 "
    "float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn_x2 bits8 bits16 bits1x8 bits2x4 bits4x2"
).split()
_DCP_METADATA_CLASSES = (
    "Metadata MetadataIndex StorageMeta TensorProperties TensorStorageMetadata "
    "BytesStorageMetadata ChunkStorageMetadata"
).split()


_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
#: The planner's dataclasses: Megatron-LM's ``torch_dist`` format pickles its save plans
#: into ``.metadata`` (``planner_data``).
_PLANNER_MODULE = "torch.distributed.checkpoint.planner"
_PLANNER_CLASSES = ("SavePlan", "WriteItem", "TensorWriteData", "BytesIOWriteData")


def _allowed_globals() -> dict[tuple[str, str], Any]:
    table: dict[tuple[str, str], Any] = {}
    for name in _DCP_METADATA_CLASSES:
        table[(_METADATA_MODULE, name)] = _record_class(name)
    # Up to torch 2.2, DCP pickled ShardedTensor's TensorProperties and memory-format enum.
    sharded = "torch.distributed._shard.sharded_tensor.metadata"
    table[(sharded, "TensorProperties")] = table[(_METADATA_MODULE, "TensorProperties")]
    table[(sharded, "MEM_FORMAT_ENCODING")] = ShardedMemoryFormatEncoding
    table[("torch.distributed.checkpoint.filesystem", "_StorageInfo")] = _record_class(
        "_StorageInfo"
    )
    table[(_METADATA_MODULE, "_MEM_FORMAT_ENCODING")] = MemoryFormatEncoding
    for name in _PLANNER_CLASSES:
        table[(_PLANNER_MODULE, name)] = _record_class(name)
    table[(_PLANNER_MODULE, "WriteItemType")] = WriteItemType
    table[("builtins", "getattr")] = _enum_member
    table[("torch.serialization", "_get_layout")] = _get_layout
    table[("torch", "Size")] = TorchSize
    for dtype in _DTYPES:
        table[("torch", dtype)] = TorchName(f"torch.{dtype}")
    for fmt in ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format"):
        table[("torch", fmt)] = TorchName(f"torch.{fmt}")
    # StorageMeta.checkpoint_id; Python 3.13 pickles pathlib's classes from pathlib._local.
    for module in ("pathlib", "pathlib._local"):
        table[(module, "PosixPath")] = PosixPath
        table[(module, "PurePosixPath")] = PurePosixPath
        table[(module, "Path")] = Path
    table[("collections", "OrderedDict")] = OrderedDict
    table[("builtins", "set")] = set
    table[("builtins", "frozenset")] = frozenset
    table[("builtins", "complex")] = complex
    return table


#: Every global a DCP ``.metadata`` may name, as exact (module, name) pairs, and what each
#: becomes. Checked against the metadata that the installed torch writes (tests).
ALLOWED_GLOBALS: dict[tuple[str, str], Any] = _allowed_globals()


#: CPU seconds one parse of ``.metadata`` may take: about 55 MB of metadata (some 275,000
#: tensor entries) at the machine's measured 1.1 us a byte; past it the checkpoint is not
#: judged (still loadable), never held up.
METADATA_CPU_S = 60.0


class AllowListRules(Rules):
    """The DCP reader's rules for the linear pickle machine: only the exact pairs of
    :data:`ALLOWED_GLOBALS`, built into inert stand-ins; dict keys and set members are
    strings or stand-ins (hashed by identity), never numbers or tuples a file could make
    collide."""

    sets = True

    def find_global(self, module: str, name: str) -> object:
        if "." in name:
            raise PlainPickleError(f"disallowed dotted global {module[:80]} {name[:80]}")
        try:
            found: object = ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise PlainPickleError(f"disallowed global {module[:80]} {name[:80]}") from None
        return found

    def call(self, function: object, args: tuple[object, ...]) -> object:
        if function in (set, frozenset, OrderedDict):
            members = args[0] if len(args) == 1 else ()
            if len(args) > 1 or not isinstance(members, list | tuple):
                raise PlainPickleError(f"{_brief(function)} of {_brief(args)}")
            if function is OrderedDict:
                if members:
                    raise PlainPickleError("OrderedDict built from pairs (the format has none)")
                return OrderedDict()
            for member in members:
                if not self.key_allowed(member):
                    raise PickleTooCostly(f"a set member of type {type(member).__name__}: refused")
            return set(members) if function is set else frozenset(members)
        if not callable(function) or (isinstance(function, type) and issubclass(function, Record)):
            raise PlainPickleError(f"REDUCE of {_brief(function)}")
        return function(*args)

    def new_object(self, cls: object, args: tuple[object, ...]) -> object:
        if not (isinstance(cls, type) and issubclass(cls, Record)):
            raise PlainPickleError(f"NEWOBJ of {_brief(cls)}")
        return cls.__new__(cls, *args)

    def build(self, target: object, state: object) -> None:
        if not isinstance(target, Record):
            raise PlainPickleError(f"BUILD of a {type(target).__name__}")
        target.__setstate__(state)

    def key_allowed(self, key: object) -> bool:
        return isinstance(key, str | Record)


#: The most distinct unknown globals one inert parse makes stand-ins for.
MAX_UNKNOWN_GLOBALS = 64


class InertGlobal(Record):
    """What :class:`InertRules` makes of a global of a torch module: called with any
    arguments (kept in ``args``), it builds an inert record of the same kind."""

    origin: tuple[str, str] = ("", "")  # the (module, name) the pickle asked for

    def __new__(cls, *args: object, **kwargs: object) -> InertGlobal:
        return super().__new__(cls)

    def __init__(self, *args: object, **kwargs: object) -> None:
        if args or kwargs:
            self.__dict__["args"] = args


def _from_torch(module: str) -> bool:
    return module == "torch" or module.startswith("torch.")


def _inert_getattr(owner: object, name: object) -> Any:
    """``getattr`` in an inert parse: an enum member of a stand-in, or an inert record."""
    if isinstance(owner, type) and issubclass(owner, InertGlobal) and isinstance(name, str):
        return owner()
    return _enum_member(owner, name)


class InertRules(AllowListRules):
    """Like the allow-list, but every global of a torch module (known or not) becomes an
    :class:`InertGlobal` class; records which of them the allow-list does not know."""

    def __init__(self) -> None:
        self.classes: dict[tuple[str, str], type[InertGlobal]] = {}
        self.unknown: list[str] = []

    def find_global(self, module: str, name: str) -> object:
        if "." in name or not _from_torch(module):
            if (module, name) == ("builtins", "getattr"):
                return _inert_getattr
            return super().find_global(module, name)
        pair = (module, name)
        if pair not in self.classes:
            if len(self.classes) >= MAX_UNKNOWN_GLOBALS:
                raise PlainPickleError("too many distinct torch globals")
            self.classes[pair] = type(name, (InertGlobal,), {"kind": name, "origin": pair})
            if pair not in ALLOWED_GLOBALS:
                self.unknown.append(f"{module[:80]}.{name[:80]}")
        return self.classes[pair]

    def call(self, function: object, args: tuple[object, ...]) -> object:
        if isinstance(function, type) and issubclass(function, InertGlobal):
            return function(*args)
        return super().call(function, args)


def _kind(obj: object) -> str:
    return obj.kind if isinstance(obj, Record) else type(obj).__name__


def unpickle_metadata(data: bytes) -> Any:
    """Unpickle ``.metadata`` bytes with the allow-list, in time linear in their size and
    within :data:`METADATA_CPU_S`.

    Raises :class:`UnsupportedMetadata` for an intact Metadata of a PyTorch the allow-list
    does not know, and for metadata too costly to read (keys whose hash it chose, or past
    the CPU budget: not judged, no storage references); :class:`MetadataError` for
    anything else it refuses.
    """
    try:
        meta = load_with(data, AllowListRules(), cpu_budget_s=METADATA_CPU_S)
    except PickleTooCostly as exc:
        raise _too_costly(exc) from exc
    except Exception as exc:  # any unpickling failure means a garbled, hostile or unknown file
        raise _unsupported_or_garbled(exc, data) from exc
    if _kind(meta) != "Metadata" or not hasattr(meta, "storage_data"):
        raise MetadataError(f".metadata holds a {_kind(meta)[:40]}, not a DCP Metadata")
    return meta


def _too_costly(exc: PickleTooCostly) -> UnsupportedMetadata:
    return UnsupportedMetadata(f".metadata not read: {str(exc)[:200]}", None)


def _unsupported_or_garbled(refused: Exception, data: bytes) -> MetadataError:
    """What to make of ``data`` that the allow-list refused with ``refused``:
    UnsupportedMetadata if an inert parse yields a DCP Metadata, else garbled."""
    why = f"{type(refused).__name__}: {str(refused)[:200]}"
    garbled = MetadataError(f".metadata garbled ({why})")
    inert = InertRules()
    try:
        meta = load_with(data, inert, cpu_budget_s=METADATA_CPU_S)
    except PickleTooCostly as exc:
        return _too_costly(exc)
    except Exception:  # not even an inert parse: garbled or hostile
        return garbled
    if not isinstance(meta, InertGlobal) or meta.origin != (_METADATA_MODULE, "Metadata"):
        return garbled
    version = getattr(meta, "version", None)
    source = "a PyTorch resurrect does not know"
    if isinstance(version, str) and version.isprintable() and len(version) <= 40:
        source += f" (DCP format version {version})"
    names = ", ".join(inert.unknown[:3]) + (" ..." if len(inert.unknown) > 3 else "")
    detail = f"names {names}" if names else why
    try:
        refs: list[StorageRef] | None = storage_refs(meta)
    except MetadataError:
        refs = None
    return UnsupportedMetadata(f"unsupported metadata from {source}: {detail}", refs)


def load_metadata_safely(ckpt: Path) -> Any:
    """Read ``ckpt/.metadata`` once (no symlinks, regular file, size cap) and unpickle it
    with the allow-list; raise MetadataError."""
    try:
        data = read_capped(ckpt / METADATA_NAME, MAX_METADATA_BYTES)
    except OSError as exc:
        raise MetadataError(f".metadata unreadable ({describe_oserror(exc)})") from exc
    if not data:
        raise MetadataError(".metadata is a zero-byte file")
    return unpickle_metadata(data)


def check_structure(meta: Any) -> None:
    """Full-level consistency of the unpickled metadata (what torch's loader relies on):
    every tensor entry has properties, a size and chunks inside that size; every storage
    entry is keyed by an index naming an entry. Raises MetadataError."""
    entries = getattr(meta, "state_dict_metadata", None)
    if not isinstance(entries, dict):
        raise MetadataError(".metadata has no state_dict_metadata map")
    for fqn, entry in entries.items():
        kind = _kind(entry)
        if kind == "BytesStorageMetadata":
            continue
        if kind != "TensorStorageMetadata":
            raise MetadataError(f".metadata entry {_brief(fqn)} is a {kind[:40]}")
        size = getattr(entry, "size", None)
        chunks = getattr(entry, "chunks", None)
        if not isinstance(size, tuple) or not isinstance(chunks, list):
            raise MetadataError(f".metadata tensor {_brief(fqn)} has no size or chunk list")
        for chunk in chunks:
            offsets = getattr(chunk, "offsets", None)
            sizes = getattr(chunk, "sizes", None)
            if (
                not isinstance(offsets, tuple)
                or not isinstance(sizes, tuple)
                or not len(offsets) == len(sizes) == len(size)
                or not all(type(v) is int for v in (*offsets, *sizes, *size))
                or any(
                    o < 0 or n < 0 or o + n > d
                    for o, n, d in zip(offsets, sizes, size, strict=True)
                )
            ):
                raise MetadataError(f".metadata tensor {_brief(fqn)} has a chunk outside its size")
    storage = getattr(meta, "storage_data", None)
    if isinstance(storage, dict):
        for index in storage:
            fqn = getattr(index, "fqn", None)
            if _kind(index) != "MetadataIndex" or fqn not in entries:
                raise MetadataError(f".metadata storage entry for unknown item {_brief(fqn)}")


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
        if not isinstance(rel, str) or type(offset) is not int or type(length) is not int:
            raise MetadataError(f".metadata has a malformed storage entry: {_brief(info)}")
        if offset < 0 or length < 0 or os.path.isabs(rel) or ".." in Path(rel).parts:
            raise MetadataError(f".metadata has an invalid storage entry: {_brief(info)}")
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
    path: Path,
    refs: list[StorageRef],
    on_bytes: Callable[[int], None] | None = None,
    *,
    limits: VerifyLimits = DEFAULT_LIMITS,
) -> str | None:
    """Full check of one storage file: each untransformed item is a torch.save zip with good
    CRCs. Returns the first problem, or None."""
    from resurrect.checkpoint.zipcheck import ZipDamage, check_archive

    for ref in sorted(refs, key=lambda r: r.offset):
        if ref.transformed or ref.length == 0:
            continue
        try:
            check_archive(
                path,
                offset=ref.offset,
                length=ref.length,
                full=True,
                on_bytes=on_bytes,
                limits=limits,
            )
        except ZipDamage as exc:
            return f"{ref.relative_path} @ {ref.offset}: {exc}"
        except OSError as exc:
            return f"{ref.relative_path}: {describe_oserror(exc)}"
    return None
