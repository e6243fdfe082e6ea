"""Failure families found in real logs, written here in variants the corpus does not contain."""

from __future__ import annotations

from resurrect.contracts import Diagnosis, FaultClass, RecoveryAction
from resurrect.rules import diagnose_lines, load_engine
from resurrect.rules.scheduler_evidence import WEAK_LOG_CONFIDENCE

ENGINE = load_engine()


def diag(text: str) -> Diagnosis:
    return diagnose_lines(text.strip("\n").splitlines(), file="job.log", engine=ENGINE)


# -- hangs that end in an interrupt ---------------------------------------------------------

BARRIER_TRACEBACK = """
[rank1]: Traceback (most recent call last):
[rank1]:   File "/work/train.py", line 212, in <module>
[rank1]:     dist.barrier()
[rank1]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 79, in wrapper
[rank1]:     return func(*args, **kwargs)
[rank1]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4159, in barrier
[rank1]:     work.wait()
[rank1]: KeyboardInterrupt
"""


def test_ctrl_c_while_parked_in_a_barrier_is_a_hang() -> None:
    d = diag("W0614 10:00:01.000 7 api.py:704] Received 2 death signal\n" + BARRIER_TRACEBACK)
    assert d.fault_class is FaultClass.JOB_HANG
    assert d.action is RecoveryAction.RESTART
    assert "blocking call" in d.summary


def test_ctrl_c_in_the_middle_of_computing_is_a_cancellation() -> None:
    d = diag("""
Traceback (most recent call last):
  File "train.py", line 40, in <module>
    loss = model(batch)
  File "model.py", line 88, in forward
    h = self.mlp(x)
KeyboardInterrupt
""")
    assert d.fault_class is FaultClass.JOB_CANCELLED
    assert d.action is RecoveryAction.NONE


def test_echoed_ctrl_c_before_a_traceback_into_a_queue_get_is_a_hang() -> None:
    d = diag("""
^CTraceback (most recent call last):
  File "train.py", line 99, in <module>
    for batch in loader:
  File "/usr/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1328, in _next_data
    idx, data = self._get_data()
  File "/usr/lib/python3.10/multiprocessing/queues.py", line 113, in get
    if not self._poll(timeout):
""")
    assert d.fault_class is FaultClass.JOB_HANG


def test_sigterm_to_the_launcher_after_twenty_minutes_of_silence_is_a_hang() -> None:
    silent = diag("""
W0614 09:40:00.000000 77 train.py:301] step 4200 loss 1.93
W0614 10:00:01.000000 77 torch/distributed/elastic/agent/server/api.py:704] Received 15 death signal, shutting down workers
""")
    assert silent.fault_class is FaultClass.JOB_HANG
    assert "no output for 20 min" in silent.summary
    busy = diag("""
W0614 09:59:58.000000 77 train.py:301] step 4200 loss 1.93
W0614 10:00:01.000000 77 torch/distributed/elastic/agent/server/api.py:704] Received 15 death signal, shutting down workers
""")
    assert busy.fault_class is FaultClass.JOB_CANCELLED


def test_scancel_after_a_long_silence_is_a_hang() -> None:
    d = diag("""
2025-06-01 08:00:00 | iteration 9000 | loss 1.7
slurmstepd: error: *** JOB 41 ON gpu3 CANCELLED AT 2025-06-01T09:30:00 ***
""")
    assert d.fault_class is FaultClass.JOB_HANG


def test_an_interrupt_never_hides_a_failure() -> None:
    d = diag(
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        + BARRIER_TRACEBACK
    )
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM


def test_a_process_dump_stopped_in_a_lock_with_nothing_failing_is_a_stall() -> None:
    d = diag("""
Thread 0x00007f49c70e5700 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 320 in wait
  File "/usr/lib/python3.10/multiprocessing/queues.py", line 113 in get
""")
    assert d.fault_class is FaultClass.JOB_HANG
    assert d.confidence < 0.5


# -- the launcher lost its terminal ---------------------------------------------------------


def test_sighup_to_torchrun_is_a_cancellation_not_a_fault() -> None:
    for line in (
        "W0920 09:10:41.194000 84933 api.py:719] Received Signals.SIGHUP death signal, shutting "
        "down workers",
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 77 got signal: 1",
        "run.sh: line 9: 4242 Hangup                  torchrun --nproc-per-node 8 train.py",
    ):
        d = diag(line)
        assert d.fault_class is FaultClass.JOB_CANCELLED, line
        assert d.action is RecoveryAction.NONE


def test_submitit_sighup_is_still_a_preemption() -> None:
    d = diag(
        "submitit WARNING (2024-02-02 10:00:00,000) - Caught signal SIGHUP on n7: this job is "
        "preempted."
    )
    assert d.fault_class is FaultClass.JOB_PREEMPTED


# -- host OOM in other words ------------------------------------------------------------------


def test_ray_memory_monitor_kill_is_a_host_oom() -> None:
    d = diag(
        "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this "
        "task.\nMemory on the node (IP: 10.1.2.3, ID: 9f) where the task (task ID: 77, "
        "name=train, pid=501) was running was 61.50GB / 64.00GB (0.961; threshold 0.95). Ray "
        "killed this worker (ID: 1a) because it was the most recently scheduled task"
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.action is RecoveryAction.STOP


def test_a_ray_worker_that_died_naming_the_oom_killer_is_not_a_segfault() -> None:
    d = diag(
        "(raylet) A worker died or was killed while executing a task by an unexpected system "
        "error. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. "
        "(2) ray stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV "
        "or other unexpected errors."
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM


def test_bare_sigkill_after_growing_host_memory_is_a_firm_host_oom() -> None:
    kill = (
        "E0101 00:00:09.000 1 api.py:833] failed (exitcode: -9) local_rank: 3 (pid: 9) of "
        "binary: python"
    )
    bare = diag(kill)
    assert bare.fault_class is FaultClass.MEMORY_HOST_OOM
    assert bare.action is RecoveryAction.RESTART
    grown = diag(
        "step 10 | CPU memory usage: 40.1 GB\nstep 20 | CPU memory usage: 58.7 GB\n" + kill
    )
    assert grown.fault_class is FaultClass.MEMORY_HOST_OOM
    assert grown.confidence >= 0.5 and grown.action is RecoveryAction.STOP
    assert grown.culprit_ranks == [3]


def test_mpirun_signal_9_names_the_rank() -> None:
    d = diag(
        "mpirun noticed that process rank 5 with PID 77 on node gpu-12 exited on signal 9 (Killed)."
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert (d.culprit_ranks, d.culprit_hosts) == ([5], ["gpu-12"])


# -- NVLink --------------------------------------------------------------------------------------


def test_nvlink_xids_are_fabric_and_xid45_points_at_its_cause() -> None:
    d = diag("""
Jun 02 11:00:00 dgx-07 kernel: NVRM: Xid (PCI:0000:3b:00): 45, pid=901, name=python3, Ch 00000004 caused by previous Xid 147
Jun 02 11:00:00 dgx-07 kernel: NVRM: Xid (PCI:0000:5c:00): 45, pid=902, name=python3, Ch 00000004 caused by previous Xid 147
[rank3]:[E602 11:10:00.1 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.
""")
    assert d.fault_class is FaultClass.NETWORK_FABRIC
    assert d.culprit_hosts == ["dgx-07"]
    assert d.action is RecoveryAction.DRAIN_AND_RESTART


def test_xid45_caused_by_a_memory_xid_is_gpu_hardware() -> None:
    d = diag(
        "NVRM: Xid (PCI:0000:3b:00): 45, pid=1, name=python3, Ch 00000004 caused by previous Xid 94"
    )
    assert d.fault_class is FaultClass.GPU_HARDWARE


def test_a_lone_xid45_is_no_diagnosis() -> None:
    d = diag("NVRM: Xid (PCI:0000:3b:00): 45, pid=1, name=python3, Ch 00000004")
    assert d.fault_class is FaultClass.UNKNOWN


# -- a lost peer -----------------------------------------------------------------------------


def test_survivors_losing_one_peer_blame_that_peer() -> None:
    d = diag("""
[rank0]: RuntimeError: [/opt/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.4.0.21]:29511
[rank1]: RuntimeError: [/opt/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.4.0.21]:29511
[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.
""")
    assert d.fault_class is FaultClass.NODE_LOST
    assert d.culprit_hosts == ["10.4.0.21"] and d.culprit_ranks == []
    # inferred, not observed: a node loss the scheduler saw (with the node's name) takes over
    assert d.confidence < WEAK_LOG_CONFIDENCE


def test_a_peer_that_died_of_its_own_cause_is_not_a_lost_node() -> None:
    d = diag("""
[rank0]: RuntimeError: [/opt/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.4.0.21]:29511
E0101 00:00:09.000 1 api.py:833] failed (exitcode: -9) local_rank: 1 (pid: 9) of binary: python
""")
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM  # never a drain on a workload fault


def test_connections_closed_by_many_peers_name_no_single_node() -> None:
    d = diag("""
RuntimeError: [pair.cc:598] Connection closed by peer [10.4.0.21]:29511
RuntimeError: [pair.cc:598] Connection closed by peer [10.4.0.22]:29511
""")
    assert d.fault_class is FaultClass.NODE_LOST
    assert d.culprit_hosts == [] and d.action is RecoveryAction.RESTART


def test_salloc_node_failure_names_the_node() -> None:
    d = diag("salloc: error: Node failure on worker-1")
    assert (d.fault_class, d.culprit_hosts) == (FaultClass.NODE_LOST, ["worker-1"])


# -- preemption behind a timeout message ------------------------------------------------------


def test_wrapper_timeout_long_before_the_limit_is_a_preemption() -> None:
    d = diag("""
submitit INFO (2024-01-01 10:00:00,000) - Job has timed out. Ran 37 minutes out of requested 240 minutes.
submitit WARNING (2024-01-01 10:00:00,001) - Caught signal SIGUSR1 on n3: this job is timed-out.
""")
    assert d.fault_class is FaultClass.JOB_PREEMPTED
    at_limit = diag(
        "submitit INFO (2024-01-01 10:00:00,000) - Job has timed out. Ran 239 minutes out of "
        "requested 240 minutes."
    )
    assert at_limit.fault_class is FaultClass.JOB_TIME_LIMIT


def test_the_schedulers_word_decides_over_the_wrapper() -> None:
    d = diag("""
submitit WARNING (2024-01-01 10:00:00,001) - Caught signal SIGUSR1 on n3: this job is timed-out.
slurmstepd: error: *** JOB 55 ON n3 CANCELLED AT 2024-01-01T10:00:02 DUE TO PREEMPTION ***
""")
    assert d.fault_class is FaultClass.JOB_PREEMPTED
    d = diag("""
submitit INFO (2024-01-01 10:00:00,000) - Job has timed out. Ran 37 minutes out of requested 240 minutes.
slurmstepd: error: *** JOB 55 ON n3 CANCELLED AT 2024-01-01T10:00:02 DUE TO TIME LIMIT ***
""")
    assert d.fault_class is FaultClass.JOB_TIME_LIMIT


# -- fabric culprits and launcher output --------------------------------------------------------


def test_a_host_alone_reporting_its_own_adapter_is_the_fabric_culprit() -> None:
    d = diag("""
2019-06-02T16:13:44.884Z: [1,12]<stdout>:gpu-n4:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error
2019-06-02T16:13:44.888Z: [1,13]<stdout>:gpu-n4:812:866 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error
""")
    assert d.fault_class is FaultClass.NETWORK_FABRIC
    assert d.culprit_hosts == ["gpu-n4"] and d.culprit_ranks == [12, 13]


def test_completion_errors_on_both_ends_name_no_host() -> None:
    d = diag("""
gpu5:1:2 [0] transport/net_ib.cu:788 NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129
gpu4:1:2 [0] transport/net_ib.cu:788 NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129
gpu5:1:1 [1] init.cu:194 NCCL WARN Cuda failure 'an illegal memory access was encountered'
""")
    assert d.fault_class is FaultClass.NETWORK_FABRIC
    assert d.culprit_hosts == []


def test_the_launchers_summary_alone_names_no_cause() -> None:
    d = diag("""
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
[1]:
  host      : node-a
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 101)
""")
    assert d.fault_class is FaultClass.UNKNOWN


def test_lagging_rank_is_compared_within_one_process_group_only() -> None:
    d = diag("""
[rank13]:[E218 04:54:22.86 ProcessGroupNCCL.cpp:1795] [PG ID 11 PG GUID 119 Rank 1] Exception (either an error or timeout) detected by watchdog at work: 216, last enqueued NCCL work: 220, last completed NCCL work: 215.
[rank15]:[E218 04:54:22.88 ProcessGroupNCCL.cpp:1795] [PG ID 11 PG GUID 112 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 57, last enqueued NCCL work: 57, last completed NCCL work: 56.
""")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == []


def test_culprit_ranks_come_in_the_order_they_printed() -> None:
    d = diag("""
[rank3]:[E0101 10:00:07.5 ProcessGroupNCCL.cpp:1] [PG 0 Rank 3] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered
[rank1]:[E0101 10:00:02.1 ProcessGroupNCCL.cpp:1] [PG 0 Rank 1] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered
""")
    assert d.fault_class is FaultClass.CUDA_ERROR
    assert d.culprit_ranks == [1, 3]


def test_a_loopback_peer_is_a_local_process_not_a_lost_node() -> None:
    d = diag(
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
        "peer [127.0.0.1]:38032"
    )
    assert d.fault_class is FaultClass.UNKNOWN


def test_interrupted_workers_parked_in_a_queue_after_the_launchers_signal_are_a_hang() -> None:
    d = diag("""
WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers
WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 1993703 closing signal SIGINT
Traceback (most recent call last):
  File "train.py", line 241, in train
    batch = next(self.dl)
  File "/opt/venv/lib/python3.8/site-packages/torch/utils/data/dataloader.py", line 1132, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
""")
    assert d.fault_class is FaultClass.JOB_HANG


def test_a_persons_sigint_to_the_launcher_with_nothing_failed_is_a_hang() -> None:
    """The launcher's own shutdown (waiting for its workers) says nothing either way: a person
    interrupting a distributed launcher that printed no failure ends a stall."""
    d = diag("""
torch.distributed.elastic.multiprocessing.api.SignalException: Process 3449727 got signal: 2
Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 912, in _close
    handler.proc.wait(time_to_wait)
  File "/usr/lib/python3.12/subprocess.py", line 1264, in wait
    return self._wait(timeout=timeout)
""")
    assert d.fault_class is FaultClass.JOB_HANG
    assert "interrupted the distributed launcher" in d.summary
    assert d.confidence < 0.55  # weaker than an interrupt right after the progress that stopped
