"""Hand-written multi-rank failure logs of the kinds PyTorch/NCCL/Megatron/Slurm jobs produce."""

from __future__ import annotations

import pytest

from resurrect.contracts import Diagnosis, FaultClass, RecoveryAction, SignalKind
from resurrect.rules import attribute, diagnose_lines, load_engine

ENGINE = load_engine()


def diag(text: str, rank_to_host: dict[int, str] | None = None) -> Diagnosis:
    """Diagnose a log given as one string (as if it were job.log)."""
    lines = text.strip("\n").splitlines()
    return diagnose_lines(lines, file="job.log", engine=ENGINE, rank_to_host=rank_to_host)


WATCHDOG = (
    "[rank{r}]:[E1206 18:44:12.715 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600061 milliseconds before timing out."
)
PROGRESS = (
    "[rank{r}]:[E1206 18:44:12.715 ProcessGroupNCCL.cpp:1664] [PG 1 Rank {r}] Exception (either an "
    "error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq}, "
    "last completed NCCL work: {last}."
)


def test_xid79_beats_collective_timeouts_and_names_the_host() -> None:
    lines = [WATCHDOG.format(r=r, seq=900) for r in range(8)]
    lines.insert(
        3, "gpu-node-02 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    )
    lines.insert(
        3,
        "Nov 29 19:00:00 gpu-node-02 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has "
        "fallen off the bus.",
    )
    d = diag("\n".join(lines))
    assert d.fault_class is FaultClass.GPU_HARDWARE
    assert d.culprit_hosts == ["gpu-node-02"]
    assert d.culprit_gpus == ["0000:3b:00"]
    assert d.action is RecoveryAction.DRAIN_AND_RESTART
    assert len(d.cascade) == 8 and all(e.role == "cascade" for e in d.cascade)


def test_gpu_hardware_without_host_restarts_instead_of_draining() -> None:
    d = diag("RuntimeError: CUDA error: uncorrectable ECC error encountered")
    assert d.fault_class is FaultClass.GPU_HARDWARE
    assert d.action is RecoveryAction.RESTART


def test_collective_timeout_points_at_the_rank_that_never_reported() -> None:
    lines = ["WORLD_SIZE=4"] + [WATCHDOG.format(r=r, seq=51) for r in (0, 1, 3)]
    d = diag("\n".join(lines))
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == [2]


def test_collective_timeout_points_at_lowest_last_completed() -> None:
    lines = [PROGRESS.format(r=r, seq=120, last=119) for r in (0, 1, 2)]
    lines.append(PROGRESS.format(r=3, seq=117, last=116))
    d = diag("\n".join(lines), rank_to_host={3: "node-b"})
    assert d.culprit_ranks == [3]
    assert d.culprit_hosts == ["node-b"]


def test_desync_report_naming_one_rank() -> None:
    d = diag("""
[rank0]:[E ProcessGroupNCCL.cpp:1936] Rank 0
\t - [0] Timeout at collective: ALLREDUCE, #12
\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:
\t   - [5] did not join collective #12 (count from 1)
""")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == [5]


# One log each, and the class it must get.
TYPICAL_FAILURES = [
    (
        "n3:77:80 [2] NCCL WARN NET/IB : Got completion from peer 10.0.0.8<3344> with error "
        "12, opcode 0, len 0, vendor err 129\n"
        "RuntimeError: NCCL communicator was aborted on rank 5.",
        FaultClass.NETWORK_FABRIC,
    ),
    (
        "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call",
        FaultClass.CUDA_ERROR,
    ),
    (
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU "
        "0; 79.15 GiB total capacity)",
        FaultClass.MEMORY_DEVICE_OOM,
    ),
    (
        "[rank6]:[E ProcessGroupNCCL.cpp:577] [Rank 6] Some NCCL operations have failed or "
        "timed out.\n"
        "RuntimeError: NCCL communicator was aborted on rank 6.",
        FaultClass.COLLECTIVE_TIMEOUT,
    ),
    ("OSError: [Errno 116] Stale file handle", FaultClass.STORAGE_ERROR),
    (
        '  File "save.py", line 3, in save\nOSError: [Errno 28] No space left on device',
        FaultClass.STORAGE_ERROR,
    ),
    (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 10, in <module>\n'
        '    cfg["lr"]\n'
        "KeyError: 'lr'",
        FaultClass.APP_ERROR,
    ),
    (
        'Traceback (most recent call last):\n  File "train.py", line 3, in f\nValueError: '
        "invalid literal for int() with base 10: 'x'",
        FaultClass.APP_ERROR,
    ),
    (
        "/var/spool/slurmd/job9/slurm_script: line 7: 31337 Segmentation fault      (core "
        "dumped) python train.py",
        FaultClass.PROCESS_CRASH,
    ),
    (
        "slurmstepd: error: *** JOB 12 ON gpu1 CANCELLED AT 2025-01-01T00:00:00 DUE TO "
        "PREEMPTION ***",
        FaultClass.JOB_PREEMPTED,
    ),
    (
        "slurmstepd: error: *** JOB 12 ON gpu1 CANCELLED AT 2025-01-01T00:00:00 DUE TO NODE "
        "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
        FaultClass.NODE_LOST,
    ),
    (
        "slurmstepd: error: *** JOB 12 ON gpu1 CANCELLED AT 2025-01-01T00:00:00 ***",
        FaultClass.JOB_CANCELLED,
    ),
    (
        "slurmstepd: error: Detected 3 oom_kill events in StepId=12.0. Some of your processes "
        "may have been killed by the cgroup out-of-memory handler.",
        FaultClass.MEMORY_HOST_OOM,
    ),
    (
        "[ 881.1] NVRM: Xid (PCI:0000:07:00): 48, pid=11, DBE (double bit error) ECC error",
        FaultClass.GPU_HARDWARE,
    ),
    (
        "terminate called after throwing an instance of 'c10::Error'\nAborted (core dumped)",
        FaultClass.PROCESS_CRASH,
    ),
]


def test_sigkill_is_confirmed_by_an_oom_line() -> None:
    weak = diag(
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 2 "
        "(pid: 9) of binary: python"
    )
    assert weak.fault_class is FaultClass.MEMORY_HOST_OOM
    assert weak.confidence < 0.5 and weak.action is RecoveryAction.RESTART
    strong = diag(
        "slurmstepd: error: Detected 1 oom_kill event in StepId=5.0.\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 2 "
        "(pid: 9) of binary: python"
    )
    assert strong.fault_class is FaultClass.MEMORY_HOST_OOM
    assert strong.confidence >= 0.9 and strong.action is RecoveryAction.STOP


ROOT_CAUSE_BLOCK = """
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-01-01_10:00:05
  host      : node-a
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 101)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 101
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-01-01_10:00:01
  host      : node-c
  rank      : 12 (local_rank: 4)
  exitcode  : -11 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 4242
============================================================
"""


def test_torchelastic_root_cause_block_maps_rank_to_host() -> None:
    d = diag(ROOT_CAUSE_BLOCK)
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == [12]
    assert d.culprit_hosts == ["node-c"]


def test_time_limit_after_long_silence_is_a_hang() -> None:
    d = diag("""
2025-03-01 10:00:00 iteration 500/1000 loss 2.1
slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2025-03-01T11:30:00 DUE TO TIME LIMIT ***
""")
    assert d.fault_class is FaultClass.JOB_HANG
    busy = diag("""
2025-03-01 11:29:58 iteration 999/1000 loss 2.1
slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2025-03-01T11:30:00 DUE TO TIME LIMIT ***
""")
    assert busy.fault_class is FaultClass.JOB_TIME_LIMIT
    assert busy.culprit_hosts == []


def test_no_match_is_unknown() -> None:
    d = diag("[rank0]: iteration 10/100 | loss 2.3\n[rank1]: iteration 10/100 | loss 2.4")
    assert d.fault_class is FaultClass.UNKNOWN
    assert d.confidence == 0.0 and d.action is RecoveryAction.RESTART


def test_attribute_of_nothing() -> None:
    assert attribute([]).fault_class is FaultClass.UNKNOWN


def test_fabric_host_recurring_across_pairs_is_blamed() -> None:
    lines = [
        "a1:1:2 [0] NCCL WARN NET/IB : Got completion from peer bad-node<1> with error 12, opcode "
        "0",
        "a2:1:2 [0] NCCL WARN NET/IB : Got completion from peer bad-node<1> with error 12, opcode "
        "0",
        "a3:1:2 [0] NCCL WARN NET/IB : Got completion from peer bad-node<1> with error 12, opcode "
        "0",
    ]
    d = diag("\n".join(lines))
    assert d.fault_class is FaultClass.NETWORK_FABRIC
    assert d.culprit_hosts == ["bad-node"]
    assert d.action is RecoveryAction.DRAIN_AND_RESTART


MORE_FAILURE_FAMILIES = [
    (
        "(RayTrainWorker pid=4411, ip=10.0.0.7) ray.exceptions.OutOfMemoryError: Task was "
        "killed due to the node running low on memory.",
        FaultClass.MEMORY_HOST_OOM,
    ),
    (
        "[1,3]<stderr>:Traceback (most recent call last):\n"
        '[1,3]<stderr>:  File "train.py", line 9, in <module>\n'
        "[1,3]<stderr>:IndexError: list index out of range",
        FaultClass.APP_ERROR,
    ),
    (
        "TypeError: forward() got an unexpected keyword argument 'labels'\n"
        "RuntimeError: Process 0 terminated with exit code 1",
        FaultClass.APP_ERROR,
    ),
    (
        "[E ProcessGroupNCCL.cpp:587] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1803817 milliseconds before "
        "timing out.",
        FaultClass.COLLECTIVE_TIMEOUT,
    ),
    ("Failed to initialize NVML: Driver/library version mismatch", FaultClass.GPU_HARDWARE),
    (
        "submitit WARNING (2024-01-01 00:00:00,000) - Job has timed out. Ran 1440 minutes out "
        "of requested 1440 minutes.",
        FaultClass.JOB_TIME_LIMIT,
    ),
    (
        "n2:10:20 [0] misc/socket.cc:484 NCCL WARN Net : Connect to 10.0.0.5<43023> failed : "
        "Connection refused",
        FaultClass.NETWORK_FABRIC,
    ),
    (
        "[rank5]: torch.distributed.DistBackendError: NCCL error in: "
        "ProcessGroupNCCL.cpp:1970, "
        "remote process exited or there was a network error, NCCL version 2.19.3\n"
        "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered",
        FaultClass.CUDA_ERROR,
    ),
    (
        "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal "
        "SIGSEGV",
        FaultClass.PROCESS_CRASH,
    ),
]


@pytest.mark.parametrize(("log", "expected"), [*TYPICAL_FAILURES, *MORE_FAILURE_FAMILIES])
def test_typical_failures(log: str, expected: FaultClass) -> None:
    assert diag(log).fault_class is expected


def test_spawn_sigkill_is_a_weak_host_oom_with_its_rank() -> None:
    d = diag(
        "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal "
        "SIGKILL"
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.action is RecoveryAction.RESTART and d.confidence < 0.5


def test_gpu_event_kind_uses_the_xid_table_only() -> None:
    nvml = "NVRM: Xid (PCI:0000:b1:00): 48, pid=0, DBE (double bit error) ECC error"
    (ev,) = [e for e in ENGINE.scan_line(nvml, kind=SignalKind.GPU_EVENT) if e.rule == "xid.memory"]
    assert ev.kind is SignalKind.GPU_EVENT and ev.gpu == "0000:b1:00"
    assert ENGINE.scan_line("ValueError: x", kind=SignalKind.GPU_EVENT) == []


def test_cascade_only_sigabrt_loses_to_timeout() -> None:
    d = diag(
        "[rank1]:[E ProcessGroupNCCL.cpp:1664] [PG 0 Rank 1] Exception (either an error or "
        "timeout) detected by watchdog at work: 9, last enqueued NCCL work: 9, last completed "
        "NCCL work: 8.\n"
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 1 "
        "(pid: 77) of binary: /usr/bin/python"
    )
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.evidence and all(e.role == "cascade" for e in d.evidence)


def test_training_finished_long_before_the_kill_is_not_a_hang() -> None:
    progress = "\n".join(f"[rank0]: iteration {i}/100000 | loss 2.0" for i in range(200))
    d = diag(
        "Epoch 1 training complete\n"
        + progress
        + "\nslurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2025-03-01T11:30:00 "
        "DUE TO TIME LIMIT ***"
    )
    assert d.fault_class is FaultClass.JOB_TIME_LIMIT
    hung = diag(
        "[after training is done] datetime: 2025-03-01 11:29:00\n"
        "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2025-03-01T11:30:00 DUE TO TIME LIMIT ***"
    )
    assert hung.fault_class is FaultClass.JOB_HANG
