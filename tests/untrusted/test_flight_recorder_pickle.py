"""The plain-data pickle reader behind Flight Recorder dumps: it builds exactly what the
standard unpickler builds for plain data (every protocol), and refuses everything else
before building it: objects, sets, bytes, non-string dict keys, unknown globals."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resurrect.untrusted.plain_pickle import PlainPickleError, load_plain

FIXTURES = Path(__file__).parent.parent / "fixtures" / "flight_recorder"

plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(plain, st.integers(0, pickle.HIGHEST_PROTOCOL))
def test_plain_data_reads_as_the_standard_unpickler_reads_it(value: object, protocol: int) -> None:
    raw = pickle.dumps(value, protocol=protocol)
    assert load_plain(raw) == pickle.loads(raw)


def test_shared_references_are_read() -> None:
    shared = ["completed"]
    raw = pickle.dumps({"a": shared, "b": shared, "c": (shared, shared)}, protocol=2)
    assert load_plain(raw) == {"a": ["completed"], "b": ["completed"], "c": (shared, shared)}


def test_real_pytorch_dumps_read_as_the_standard_unpickler_reads_them() -> None:
    raw = (FIXTURES / "real-gloo-rank0.pkl").read_bytes()
    assert load_plain(raw) == pickle.loads(raw)


class Exploit:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("true",))


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({1: "a"}, "dict key of type int"),
        ({(1, 2): "a"}, "dict key of type tuple"),
        ({1.5: "a"}, "dict key of type float"),
        ({None: "a"}, "dict key of type NoneType"),
        ({1, 2}, "refused"),
        (frozenset({1}), "refused"),
        (b"bytes", "refused"),
        (bytearray(b"x"), "refused"),
        (Exploit(), "global posix.system refused"),
        (Path("/etc"), "refused"),
    ],
)
def test_anything_but_plain_data_is_refused(value: object, why: str) -> None:
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(PlainPickleError, match=why):
            load_plain(pickle.dumps({"entries": [value]}, protocol=protocol))


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x80\x04",
        b"\x80\x04]",
        b"\x80\x04X\xff\xff\xff\xff",
        b"\x80\x04(.",
        b"e.",
        b"\x80\x09.",
    ],
)
def test_malformed_pickles_are_refused(raw: bytes) -> None:
    with pytest.raises(PlainPickleError):
        load_plain(raw)
