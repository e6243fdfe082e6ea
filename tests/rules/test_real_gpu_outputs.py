"""What a real GPU job printed, read as its fault (tests/fixtures/gpu-h200, made by
deploy/gpu-faults.sh on an H200 with PyTorch 2.11 and NCCL 2.28).

Each fault is the job's own: none drains a node, and torchrun's ``host : localhost`` (its
failure table on one node) names no culprit host.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from resurrect.contracts import FaultClass, RecoveryAction
from resurrect.rules import diagnose_lines, load_engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-h200"
ENGINE = load_engine()

EXPECTED = {
    "oom.log": (FaultClass.MEMORY_DEVICE_OOM, [0]),
    "assert.log": (FaultClass.CUDA_ERROR, [0]),
    "illegal.log": (FaultClass.CUDA_ERROR, [0]),
    "nccl_dup.log": (FaultClass.APP_ERROR, [0]),
    "gloo_hang.log": (FaultClass.COLLECTIVE_TIMEOUT, []),
    "segv.log": (FaultClass.PROCESS_CRASH, [0]),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_real_gpu_fault_is_read_as_the_jobs_own(name: str) -> None:
    lines = (FIXTURES / name).read_text().splitlines()
    diagnosis = diagnose_lines(lines, file=name, engine=ENGINE)
    fault_class, ranks = EXPECTED[name]
    assert diagnosis.fault_class is fault_class
    assert diagnosis.culprit_ranks == ranks
    assert diagnosis.action is not RecoveryAction.DRAIN_AND_RESTART
    assert "localhost" not in diagnosis.culprit_hosts
