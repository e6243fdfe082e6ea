"""The mechanism tier (packs/mechanism.yaml): a failure's mechanism in the vocabulary every
stack shares decides the class when no specific rule knows the wording, is weaker than any
specific rule that does, never drains a node, and leaves a log with no mechanism unknown.

The lines below are written in wordings no specific rule was taught, so that each test checks
the generic family rather than a phrase."""

from __future__ import annotations

import pytest

from resurrect.contracts import Diagnosis, FaultClass, RecoveryAction
from resurrect.rules import diagnose_lines, load_engine

ENGINE = load_engine()
DRAINING = {FaultClass.GPU_HARDWARE, FaultClass.NETWORK_FABRIC, FaultClass.NODE_LOST}


def diag(text: str) -> Diagnosis:
    return diagnose_lines(text.strip("\n").splitlines(), file="job.log", engine=ENGINE)


def decided_by_mechanism(d: Diagnosis) -> bool:
    return any((e.rule or "").startswith("mechanism.") for e in d.evidence)


def assert_tier_decides(line: str, fault_class: FaultClass) -> None:
    """``line`` alone is diagnosed as ``fault_class``, on the mechanism tier's evidence."""
    d = diag(line)
    assert d.fault_class is fault_class, d.summary
    assert decided_by_mechanism(d), d.summary


# -- a native crash, whatever names it ---------------------------------------------------


def test_a_native_backtrace_without_a_signal_line_is_a_crash() -> None:
    d = diag(
        """
step 1200 loss 2.31
[trn-04:31337] [ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x42520)[0x7f3a1c242520]
[trn-04:31337] [ 1] /opt/venv/lib/libtrainer_ext.so(_ZN7trainer4step+0x1c4)[0x7f39f00a11c4]
[trn-04:31337] [ 2] /opt/venv/bin/python3(_PyEval_EvalFrameDefault+0x2a1)[0x55d0c1a3e2a1]
"""
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.action is RecoveryAction.RESTART


def test_a_failing_address_alone_is_a_crash() -> None:
    d = diag("[node-2:4411] Failing at address: 0x7fe0000010\n")
    assert d.fault_class is FaultClass.PROCESS_CRASH


@pytest.mark.parametrize(
    "line",
    [
        "supervisor: worker pid 4242 exited with signal 11",
        "launcher: child terminated by signal SIGBUS",
        "runner: task 3 killed by signal 4",
        "Caught signal 8 (Floating point exception: integer divide by zero)",
        "trainer exited with exit code -11",
        "Process finished with exit code 139",
        "./go.sh: line 9: 777 Trace/breakpoint trap (core dumped) python fit.py",
    ],
)
def test_a_crash_signal_in_any_launchers_words_is_a_crash(line: str) -> None:
    assert_tier_decides(line, FaultClass.PROCESS_CRASH)


def test_an_abort_alone_is_a_weak_crash_that_any_root_cause_beats() -> None:
    assert diag("Fatal Python error: Aborted\n").fault_class is FaultClass.PROCESS_CRASH
    d = diag(
        """
Fatal Python error: Aborted
ValueError: expected a tensor of rank 2, got rank 3
"""
    )
    assert d.fault_class is FaultClass.APP_ERROR


def test_a_kill_signal_with_nothing_else_is_a_probable_host_oom_that_only_restarts() -> None:
    d = diag("agent: worker 1 exited with signal 9\n")
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.action is RecoveryAction.RESTART


# -- an allocation that failed: the side it failed on names the class -----------------------


@pytest.mark.parametrize(
    "line",
    [
        "E0101 blas.cc:88] failed to create cublas handle: CUBLAS_STATUS_ALLOC_FAILED",
        "Error in CuDNN: CUDNN_STATUS_ALLOC_FAILED (cudnnGetConvolutionForwardWorkspaceSize)",
        "cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`",
        "failed to create cublas handle: the resource allocation failed",
        "MIOpen Error: miopenStatusAllocFailed",
        "allocator: failed to allocate 3.5GiB of device memory for the optimizer state",
    ],
)
def test_an_allocation_that_failed_on_the_device_is_a_device_oom(line: str) -> None:
    assert_tier_decides(line, FaultClass.MEMORY_DEVICE_OOM)


@pytest.mark.parametrize(
    "line",
    [
        "[ERROR] loader.cc:90] cudaHostAlloc failed, ret[2], out of memory",
        "pipeline: Out of memory. Memory malloc failed.",
        "hipHostMalloc failed: out of memory",
        "staging buffer: out of memory on the host while packing batch 12",
    ],
)
def test_an_allocation_that_failed_on_the_host_is_a_host_oom(line: str) -> None:
    assert_tier_decides(line, FaultClass.MEMORY_HOST_OOM)


def test_a_weak_allocation_failure_never_stops_the_job() -> None:
    d = diag("[ERROR] loader.cc:90] cudaHostAlloc failed, ret[2], out of memory\n")
    assert d.action is RecoveryAction.RESTART


# -- device runtime error-code families ------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: HIP error: hipErrorIllegalAddress",
        "Check failed: cuStreamSynchronize: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure",
        "OSError: (External) ACL error, the error code is : 507011. (at op_runner.cc:40)",
        "RuntimeError: ACL stream synchronize failed, error code:507035",
        "level_zero backend failed with error: 20 (UR_RESULT_ERROR_DEVICE_REQUIREMENT_NOT_MET)",
        "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory",
    ],
)
def test_a_device_runtime_error_code_is_a_device_runtime_error(line: str) -> None:
    assert_tier_decides(line, FaultClass.CUDA_ERROR)


@pytest.mark.parametrize(
    "line",
    [
        "could not retrieve ROCM device count: HIP_ERROR_NoDevice",
        "RuntimeError: HIP error: hipErrorNoDevice",
    ],
)
def test_a_missing_device_or_driver_is_no_runtime_error_of_the_tier(line: str) -> None:
    d = diag(line)
    assert d.fault_class is not FaultClass.CUDA_ERROR
    assert not decided_by_mechanism(d)


# -- launchers naming the failed rank ------------------------------------------------------


def test_a_launcher_naming_an_aborted_rank_is_a_crash_of_that_rank() -> None:
    d = diag(
        "ERROR launch_utils.py:545] ABORT!!! Out of all 4 trainers, the trainer process with"
        " rank=[3] was aborted. Please check its log.\n"
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == [3]


def test_a_launcher_listing_several_failed_ranks_names_each() -> None:
    d = diag("ABORT!!! Out of all 8 trainers, the trainer process with rank=[2, 5] was aborted.\n")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert sorted(d.culprit_ranks) == [2, 5]


def test_the_failed_ranks_own_error_beats_the_launchers_report() -> None:
    d = diag(
        """
[rank3]: RuntimeError: HIP error: hipErrorIllegalAddress
ABORT!!! Out of all 4 trainers, the trainer process with rank=[3] was aborted.
"""
    )
    assert d.fault_class is FaultClass.CUDA_ERROR


# -- symptoms: timeouts and lost peers ------------------------------------------------------


def test_a_collective_that_timed_out_in_any_words_is_a_collective_timeout() -> None:
    d = diag("coordinator: allgather of step 88 timed out after 600 s; aborting\n")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.action is RecoveryAction.RESTART


def test_a_timeout_is_a_cascade_a_root_cause_beats() -> None:
    d = diag(
        """
[rank1]: failed to create cublas handle: CUBLAS_STATUS_ALLOC_FAILED
[rank0]: barrier timed out waiting for 1 of 2 tasks
"""
    )
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM


@pytest.mark.parametrize(
    "line",
    [
        "BrokenPipeError: [Errno 32] Broken pipe",
        "comm: send to rank 3 failed: ECONNRESET",
        "writer: peer hung up: EPIPE",
    ],
)
def test_a_lost_peer_connection_alone_stays_unknown_and_drains_nothing(line: str) -> None:
    d = diag(line)
    assert d.fault_class is FaultClass.UNKNOWN
    assert d.action is not RecoveryAction.DRAIN_AND_RESTART


def test_a_lost_peer_connection_does_not_outweigh_the_crash_it_followed() -> None:
    d = diag(
        """
worker 2 exited with signal 11
RuntimeError: [tcp/pair.cc:598] Connection reset by peer [10.1.2.3]:4242
"""
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH


# -- weaker than every specific rule, and silent without a mechanism -----------------------


def test_a_specific_rule_decides_over_the_generic_tier() -> None:
    d = diag(
        """
worker 0 exited with signal 9
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
"""
    )
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM
    assert all(not (e.rule or "").startswith("mechanism.") for e in d.evidence[:1])


@pytest.mark.parametrize(
    "text",
    [
        "step 10 loss 1.2\nstep 20 loss 1.1\n",
        "barrier_timeout: 300\nall_reduce took 12 ms\n",
        "rank 0 failed to connect to the store, retrying\n",
        "received signal 15, shutting down\n",
    ],
)
def test_a_log_without_a_failure_mechanism_stays_unknown(text: str) -> None:
    assert diag(text).fault_class is FaultClass.UNKNOWN


def test_no_mechanism_rule_names_a_class_that_drains() -> None:
    for compiled in ENGINE.rules:
        if compiled.pack == "mechanism":
            assert compiled.rule.fault_class not in DRAINING, compiled.rule.id
            assert "host" not in compiled.regex.groupindex, compiled.rule.id
