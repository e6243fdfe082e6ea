"""The issue-20 parsers under the fuzz benchmark's generated inputs, a short seeded slice
(``benchmarks/fuzz_untrusted_input.py`` runs 20,000 per parser): Flight Recorder JSON and
pickle (and a sample through the whole helper process), py-spy text, hold marks, liveness
datagrams. Each raises only its typed error, and no input is slow."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_untrusted_input.py"


def benchmark(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARK.parent))  # its sibling benchmarks/_common.py
    spec = importlib.util.spec_from_file_location("fuzz_untrusted_input", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_new_parser_raises_only_its_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    logging.disable(logging.CRITICAL)
    try:
        results = benchmark(monkeypatch).run_parsers(400, seed=2000, helper_sample=6)
    finally:
        logging.disable(logging.NOTSET)
    by_name = {r["benchmark"].rpartition(".")[2]: r for r in results}
    assert set(by_name) == {
        "flight_recorder_json",
        "flight_recorder_pickle",
        "flight_recorder_helper",
        "pyspy_text",
        "hold_mark",
        "liveness_datagram",
    }
    assert sum(r["inputs"] for r in results) >= 2000
    for result in results:
        assert result["crashes"] == 0, result
        assert result["slow"] == 0, result
    # the refusals are real: hostile dumps and forged datagrams were refused, not crashed on
    assert by_name["flight_recorder_pickle"]["refused_typed"] > 0
    assert 0 < by_name["liveness_datagram"]["refused_typed"] < 400
    # the 32,000-key attack went through the real helper, and was refused at once
    assert by_name["flight_recorder_helper"]["worst_s"] < 10.0
