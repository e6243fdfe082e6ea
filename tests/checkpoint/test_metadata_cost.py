"""A DCP ``.metadata`` costs its reader seconds at most: read by the linear pickle machine,
keys whose hash the file chooses are refused, a parse stops at its CPU budget, and the
checkpoint helper runs under a CPU and a memory limit. Such a checkpoint is "not judged",
never a core pinned until the deadline."""

from __future__ import annotations

import io
import json
import os
import random
import resource
import shutil
import struct
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resurrect.checkpoint import dcp, helper, verify_root

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
REAL = FIXTURES / "torch-2.15.0" / "step_1"
#: Integers that all hash alike (hash(k * (2**61 - 1)) == 0 for every k).
_MODULUS = (1 << 61) - 1
_META = b"\x8c%torch.distributed.checkpoint.metadata\x8c\x08Metadata\x93)\x81"


def _long(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _str(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def _colliding(count: int) -> bytes:
    return b"".join(_long(k * _MODULUS) for k in range(1, count + 1))


def metadata_with(extra: bytes) -> bytes:
    """A DCP Metadata made only of allow-listed classes whose state also holds ``extra``
    under "planner_data" (the pickle is written by hand: building the colliding dict in this
    process would itself take quadratic time)."""
    state = (
        b"}("
        + _str("state_dict_metadata")
        + b"}"
        + _str("storage_data")
        + b"}"
        + _str("planner_data")
        + extra
        + b"u"
    )
    return b"\x80\x04" + _META + state + b"b."


COLLIDING_SHAPES = {
    "dict of colliding integer keys": b"}("
    + b"".join(_long(k * _MODULUS) + b"K\x00" for k in range(1, 40_001))
    + b"u",
    "set of colliding integers (EMPTY_SET, ADDITEMS)": b"\x8f(" + _colliding(40_000) + b"\x90",
    "frozenset of colliding integers": b"(" + _colliding(40_000) + b"\x91",
    "builtins.set of a list of colliding integers": _str("builtins")
    + _str("set")
    + b"\x93]("
    + _colliding(40_000)
    + b"e\x85R",
    "dict of tuple keys": b"}(" + b"".join(_long(k) + b"\x85K\x00" for k in range(1000)) + b"u",
    "dict of float keys": b"}("
    + b"".join(b"G" + struct.pack(">d", k) + b"K\x00" for k in range(9))
    + b"u",
}


@pytest.mark.parametrize("shape", sorted(COLLIDING_SHAPES))
def test_keys_whose_hash_the_file_chooses_are_refused_in_milliseconds(shape: str) -> None:
    data = metadata_with(COLLIDING_SHAPES[shape])
    started = time.process_time()
    with pytest.raises(dcp.UnsupportedMetadata, match="refused") as caught:
        dcp.unpickle_metadata(data)
    assert time.process_time() - started < 1.0  # Python's unpickler: about 10 s for this one
    assert caught.value.refs is None


def test_a_checkpoint_with_such_metadata_is_not_judged_and_its_neighbour_is_used(
    tmp_path: Path,
) -> None:
    shutil.copytree(REAL, tmp_path / "step_1")
    shutil.copytree(REAL, tmp_path / "step_2")
    (tmp_path / "step_2" / dcp.METADATA_NAME).write_bytes(
        metadata_with(COLLIDING_SHAPES["dict of colliding integer keys"])
    )
    started = time.monotonic()
    verdict = verify_root(tmp_path, "full")
    assert time.monotonic() - started < 10
    by_name = {Path(c.path).name: c for c in verdict.candidates}
    assert by_name["step_2"].valid and not by_name["step_2"].judged
    assert "refused" in by_name["step_2"].reason
    assert by_name["step_1"].judged and by_name["step_1"].valid


def test_a_parse_stops_at_its_cpu_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dcp, "METADATA_CPU_S", 0.0)
    many = b"](" + b"K\x01" * 200_000 + b"e"
    with pytest.raises(dcp.UnsupportedMetadata, match="CPU seconds"):
        dcp.unpickle_metadata(metadata_with(many))


def test_the_helper_runs_under_a_cpu_and_a_memory_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    limits: dict[str, int | None] = {}

    def record(
        *, memory_bytes: int, cpu_s: int | None = None, file_bytes: int | None = None
    ) -> None:
        limits.update(memory_bytes=memory_bytes, cpu_s=cpu_s)

    request = helper.HelperRequest(
        op="verify",
        root=str(tmp_path),
        time_budget_s=30,
        workers=1,
        owner_uid=os.getuid(),  # as this test's user: no drop
        owner_gid=os.getgid(),
    )
    monkeypatch.setattr(helper, "limit_resources", record)
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(request.model_dump_json().encode()))
    )
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert helper.main() == 0
    assert limits["memory_bytes"] == helper.MEMORY_LIMIT_BYTES
    assert limits["cpu_s"] == 30 + dcp.METADATA_CPU_S  # its budget on its one worker, one parse
    assert resource.getrlimit(resource.RLIMIT_CPU)[0] == resource.RLIM_INFINITY  # recorded only
    reply = [json.loads(line) for line in sys.stdout.getvalue().splitlines()]  # type: ignore[attr-defined]
    assert "verdict" in reply[-1]


_REAL_BYTES = (REAL / dcp.METADATA_NAME).read_bytes()


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    edits=st.integers(1, 8),
    cut=st.one_of(st.none(), st.integers(0, len(_REAL_BYTES))),
)
def test_fuzz_mutated_real_metadata_is_read_or_refused_quickly(
    seed: int, edits: int, cut: int | None
) -> None:
    rng = random.Random(seed)
    data = bytearray(_REAL_BYTES[:cut] if cut is not None else _REAL_BYTES)
    for _ in range(edits):
        if not data:
            break
        where = rng.randrange(len(data))
        action = rng.randrange(3)
        if action == 0:
            data[where] = rng.randrange(256)
        elif action == 1:
            data[where:where] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5)))
        else:
            del data[where : where + rng.randrange(1, 5)]
    started = time.process_time()
    try:
        meta = dcp.unpickle_metadata(bytes(data))
        dcp.storage_refs(meta)
        dcp.check_structure(meta)
    except dcp.MetadataError:
        pass
    assert time.process_time() - started < 1.0
