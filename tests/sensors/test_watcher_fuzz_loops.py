"""The fuzz benchmark's harness, small: generated hostile comments, output patterns, job
snapshots and output files through the loops' per-job handlers; no handler lets anything
escape, the good job beside hostile ones is always reported, nothing is slow.
(``benchmarks/fuzz_untrusted_input.py`` runs it with 100,000 inputs.)"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_untrusted_input.py"


def test_generated_hostile_inputs_never_crash_a_loop_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARK.parent))  # its sibling benchmarks/_common.py
    spec = importlib.util.spec_from_file_location("fuzz_untrusted_input", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    logging.disable(logging.CRITICAL)  # thousands of rate-limited notes: counted, not kept
    try:
        result = module.run(3000)
    finally:
        logging.disable(logging.NOTSET)
    assert result["inputs"] >= 3000
    assert set(result["by_handler"]) == {"comment", "pattern", "watcher", "follower"}
    assert result["loop_crashes"] == 0, result["first_crash"]
    assert result["good_job_missed"] == 0
    assert result["slow"] == 0
