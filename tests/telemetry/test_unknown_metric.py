"""Unknown diagnoses are counted by the shape of their first fatal-looking line, with a bounded
set of label values (the wording comes from job output)."""

from __future__ import annotations

import pytest
from support.telemetry import shared_telemetry

from resurrect.telemetry import record


def counts(cluster: str) -> dict[str, int]:
    points = shared_telemetry().points("resurrect_unknown_diagnoses")
    return {
        dict(p.attributes)["shape"]: p.value
        for p in points
        if dict(p.attributes)["cluster"] == cluster
    }


def test_unknowns_are_counted_by_shape() -> None:
    shared_telemetry()
    record.record_unknown_diagnosis("c-shape", "exception:XlaRuntimeError")
    record.record_unknown_diagnosis("c-shape", "exception:XlaRuntimeError")
    record.record_unknown_diagnosis("c-shape", "none")
    assert counts("c-shape") == {"exception:XlaRuntimeError": 2, "none": 1}


def test_shapes_beyond_the_bound_count_as_other(monkeypatch: pytest.MonkeyPatch) -> None:
    shared_telemetry()
    monkeypatch.setattr(record, "MAX_UNKNOWN_SHAPES", 2)
    monkeypatch.setattr(record, "_UNKNOWN_SHAPES", set())
    for shape in ("exception:A", "exception:B", "exception:C", "exception:D", "exception:A"):
        record.record_unknown_diagnosis("c-bound", shape)
    assert counts("c-bound") == {"exception:A": 2, "exception:B": 1, "other": 2}
