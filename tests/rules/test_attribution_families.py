"""Failure families found in real logs, written here in variants the corpus does not contain."""

from __future__ import annotations

from resurrect.contracts import Diagnosis, FaultClass, RecoveryAction
from resurrect.rules import diagnose_lines, load_engine
from resurrect.rules.scheduler_evidence import WEAK_LOG_CONFIDENCE
from resurrect.rules.text import names_no_host

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


# -- checkpoints that cannot be read back ------------------------------------------------------


def test_a_checkpoint_record_the_reader_cannot_read_is_a_storage_error_of_that_rank() -> None:
    d = diag("""
[rank6]:   File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 1888, in load_tensor
[rank6]:     zip_file.get_storage_from_record(name, numel, torch.UntypedStorage)
[rank6]: RuntimeError: PytorchStreamReader failed reading file data/41: file read failed
""")
    assert (d.fault_class, d.culprit_ranks) == (FaultClass.STORAGE_ERROR, [6])
    assert d.action is RecoveryAction.RESTART


def test_a_checkpoint_missing_a_record_or_sized_impossibly_is_a_storage_error() -> None:
    missing = diag(
        "RuntimeError: [enforce fail at inline_container.cc:257] . file not found: archive/data/77"
    )
    assert missing.fault_class is FaultClass.STORAGE_ERROR
    sized = diag("RuntimeError: storage has wrong size: expected -8120 got 1024")
    assert sized.fault_class is FaultClass.STORAGE_ERROR


def test_a_missing_training_file_is_not_a_checkpoint_storage_error() -> None:
    d = diag("FileNotFoundError: [Errno 2] No such file or directory: 'archive/labels.csv'")
    assert d.fault_class is not FaultClass.STORAGE_ERROR


# -- a launch that never started ---------------------------------------------------------------


def test_a_hostfile_entry_ssh_cannot_reach_is_a_setup_error_not_a_lost_node() -> None:
    d = diag("""
subprocess.CalledProcessError: Command 'ssh -o PasswordAuthentication=no gpu-b07 hostname' returned non-zero exit status 255.
RuntimeError: Using hostfile at /home/u/hostfile but host=gpu-b07 was not reachable via ssh. If you are running with a single node please remove /home/u/hostfile or setup passwordless ssh.
""")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_hosts == []  # the host may be fine: nothing is drained
    assert d.action is not RecoveryAction.DRAIN_AND_RESTART


def test_a_training_command_that_exits_255_is_no_ssh_failure() -> None:
    d = diag(
        "subprocess.CalledProcessError: Command '['python', 'train.py', '--epochs', '3']' "
        "returned non-zero exit status 255."
    )
    assert "launcher.ssh_preflight_failed" not in d.summary


# -- Windows -----------------------------------------------------------------------------------


def test_a_windows_access_violation_is_a_crash() -> None:
    d = diag("""
steps:  40%|####      | 812/2000 [13:20<19:30,  1.02it/s, avr_loss=0.11]
subprocess.CalledProcessError: Command '['C:\\\\sd\\\\venv\\\\Scripts\\\\python.exe', 'train_network.py']' returned non-zero exit status 3221225477.
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH


# -- gloo ----------------------------------------------------------------------------------------


def test_gloos_pair_closure_timeout_is_a_collective_timeout_not_the_reporters_crash() -> None:
    d = diag("""
-- Process 5 terminated with the following error:
Traceback (most recent call last):
  File "/opt/venv/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", line 2003, in all_gather
    work.wait()
RuntimeError: [/opt/gloo/gloo/transport/tcp/pair.cc:589] Application timeout caused pair closure
""")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == []  # the process that reported the timeout is not its cause


# -- interrupted launchers -----------------------------------------------------------------------


def test_sigint_to_the_launcher_after_a_non_progress_line_is_a_hang() -> None:
    d = diag("""
2024-05-02 10:11:12,000 - INFO - loading checkpoint from /ckpt/step_4000
^CW0502 10:11:20.000000 881 torch/distributed/elastic/agent/server/api.py:704] Received 2 death signal, shutting down workers
W0502 10:11:20.000000 881 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 902 closing signal SIGINT
""")
    assert d.fault_class is FaultClass.JOB_HANG
    assert "interrupted the distributed launcher" in d.summary
    assert d.action is RecoveryAction.RESTART


def test_sigterm_or_sighup_to_the_launcher_stays_a_cancellation() -> None:
    for signal in ("15", "1"):
        d = diag(f"""
2024-05-02 10:11:12,000 - INFO - loading checkpoint from /ckpt/step_4000
W0502 10:11:20.000000 881 torch/distributed/elastic/agent/server/api.py:704] Received {signal} death signal, shutting down workers
""")
        assert d.fault_class is FaultClass.JOB_CANCELLED, signal


def test_an_interrupt_inside_ddps_buffer_broadcast_is_a_hang() -> None:
    d = diag("""
Traceback (most recent call last):
  File "/opt/venv/lib/python3.10/site-packages/torch/nn/parallel/distributed.py", line 1139, in forward
    self._sync_buffers()
  File "/opt/venv/lib/python3.10/site-packages/torch/nn/parallel/distributed.py", line 1781, in _sync_buffers
    self._sync_module_buffers(authoritative_rank)
KeyboardInterrupt
""")
    assert d.fault_class is FaultClass.JOB_HANG
    assert "blocking call" in d.summary


# -- Open MPI ------------------------------------------------------------------------------------


def test_open_mpis_older_lost_daemon_wording_is_a_lost_node() -> None:
    d = diag("""
 ORTE has lost communication with its daemon located on node:

   hostname:  compute-0-12
""")
    assert d.fault_class is FaultClass.NODE_LOST


# -- masked host names ---------------------------------------------------------------------------


def test_a_masked_node_names_the_rank_but_no_host() -> None:
    d = diag(
        "mpirun noticed that process rank 3 with PID xxxxx on node xxxxxxxx exited on signal 9 (Killed)."
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert (d.culprit_ranks, d.culprit_hosts) == ([3], [])
    placeholder = diag(
        "mpirun noticed that process rank 2 with PID 0 on node HOSTNAME exited on signal 9 (Killed)."
    )
    assert (placeholder.culprit_ranks, placeholder.culprit_hosts) == ([2], [])


def test_masked_loopback_and_unspecified_names_are_told_from_host_names() -> None:
    for masked in ("xxxxxxxx", "XXX.XXX.XXX.XXX", "***", "HOSTNAME", "<node>", "your_hostname"):
        assert names_no_host(masked), masked
    for loopback in (
        "localhost",
        "LOCALHOST",
        "localhost.localdomain",
        "ip6-localhost",
        "127.0.1.1",
        "::1",
        "0.0.0.0",
        "[::]",
    ):
        assert names_no_host(loopback), loopback
    for real in ("gpu-3", "node12", "10.0.0.7", "x1", "hostile-04", "ip-10-1-2-3.ec2.internal"):
        assert not names_no_host(real), real


# -- a rank named by the traceback around the decisive line ---------------------------------------


def test_the_traceback_around_an_unprefixed_error_names_its_rank() -> None:
    d = diag("""
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.21 GiB is free.
[rank2]: Traceback (most recent call last):
[rank2]:   File "/work/train.py", line 88, in <module>
[rank2]:     trainer.train()
""")
    assert (d.fault_class, d.culprit_ranks) == (FaultClass.MEMORY_DEVICE_OOM, [2])


def test_tracebacks_of_two_ranks_around_the_error_name_neither() -> None:
    d = diag("""
[rank1]: Traceback (most recent call last):
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.21 GiB is free.
[rank3]: Traceback (most recent call last):
""")
    assert d.culprit_ranks == []


def test_a_ranks_traceback_far_from_the_error_names_nothing() -> None:
    filler = "\n".join(f"step {i} loss 1.0" for i in range(12))
    d = diag(
        "[rank5]: Traceback (most recent call last):\n"
        + filler
        + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    )
    assert d.culprit_ranks == []


# -- pass 4: families validation-5 showed ----------------------------------------------------


def test_ddp_unused_parameters_split_from_its_prefix_by_another_rank_is_an_app_error() -> None:
    d = diag("""
  File "train.py", line 201, in train_step
    out = model(x)  # forward  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl
RuntimeError    out = model(x)  # forward
:
Expected to have finished reduction in the prior iteration before starting a new one. This error indicates that your module has parameters that were not used in producing loss.
""")
    assert d.fault_class is FaultClass.APP_ERROR


def test_nccl_rejecting_an_argument_of_the_launch_is_an_app_error_not_the_fabric() -> None:
    d = diag("""
RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, invalid argument, NCCL version 2.10.3
srun: error: gpu-b07: tasks 4-7: Exited with exit code 1
""")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.fault_class not in {FaultClass.NETWORK_FABRIC, FaultClass.NODE_LOST}


def test_a_short_write_of_lua_torchs_disk_file_is_a_storage_error() -> None:
    d = diag("""
[03/02/19 11:20:01 INFO] Saving checkpoint to 'model_epoch7.t7'...
/opt/torch/bin/luajit: /opt/torch/share/lua/5.1/torch/File.lua:210: write error: wrote 1048576 blocks instead of 25165824 at /opt/torch7/lib/TH/THDiskFile.c:356
""")
    assert d.fault_class is FaultClass.STORAGE_ERROR


def test_moabs_preemption_for_a_node_failure_is_a_lost_node_on_the_pbs_exec_host() -> None:
    d = diag("""
PBS Job Id: 77121.head.cluster
Job Name:   train_lm
Exec host:  gn-04/0
job deleted
job preempted (node failure)
""")
    assert d.fault_class is FaultClass.NODE_LOST
    assert d.culprit_hosts == ["gn-04"]


def test_a_preemption_for_priority_stays_a_preemption() -> None:
    d = diag(
        "slurmstepd: error: *** JOB 9 ON gn-04 CANCELLED AT 2024-03-01T10:00:00 DUE TO PREEMPTION ***"
    )
    assert d.fault_class is FaultClass.JOB_PREEMPTED


def test_open_mpis_signal_handler_names_the_crashing_host() -> None:
    d = diag("""
[gpu-node-17:30211] *** Process received signal ***
[gpu-node-17:30211] Signal: Segmentation fault (11)
[gpu-node-17:30211] Signal code: Address not mapped (1)
[gpu-node-17:30211] [ 0] /lib64/libpthread.so.0(+0xf630)[0x2b6f3e7c2630]
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_hosts == ["gpu-node-17"]


def test_the_older_orte_report_names_the_lost_node_on_its_own_line() -> None:
    d = diag("""
--------------------------------------------------------------------------
ORTE has lost communication with its daemon located on node:

  hostname:  cn-0412

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself.
""")
    assert d.fault_class is FaultClass.NODE_LOST
    assert d.culprit_hosts == ["cn-0412"]


def test_a_hostname_far_below_the_report_names_nothing() -> None:
    d = diag(
        "ORTE has lost communication with its daemon located on node:\n"
        + "\n".join(f"progress line {i}" for i in range(8))
        + "\n  hostname:  cn-0412"
    )
    assert d.fault_class is FaultClass.NODE_LOST
    assert d.culprit_hosts == []


# -- pass 5: families validation-6 showed -----------------------------------------------------


def test_an_ib_plugins_completion_error_is_the_fabric() -> None:
    for line in (
        "NET/IBP:Got completion from peer 10.9.8.7<4000> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
        "gn2:11:22 [3] NCCL WARN NET/IBext : Got completion from peer 10.9.8.6<4001> with error 12, opcode 1, len 0, vendor err 129",
    ):
        d = diag(line)
        assert d.fault_class is FaultClass.NETWORK_FABRIC, line
        assert d.culprit_hosts == [], line


def test_an_ib_plugins_device_listing_is_no_failure() -> None:
    d = diag("gn2:11:11 [0] NCCL INFO NET/IBext : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.9.8.5<0>")
    assert d.fault_class is FaultClass.UNKNOWN


def test_open_mpis_signal_backtrace_without_its_header_is_a_crash() -> None:
    d = diag("""
[1,3]<stderr>:[cn-12:4410] [ 4] /usr/bin/python(_PyEval_EvalFrameDefault+0x4a1)[0x55d0c1]
[1,3]<stderr>:[cn-12:4410] [ 5] /lib/x86_64-linux-gnu/libc.so.6(__libc_start_main+0xf3)[0x7f00]
[1,3]<stderr>:[cn-12:4410] *** End of error message ***
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == [3]
    assert d.culprit_hosts == ["cn-12"]


def test_open_mpis_backtrace_of_an_abort_after_a_timeout_stays_the_timeout() -> None:
    d = diag("""
[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600431 milliseconds before timing out.
[cn-12:4410] *** Process received signal ***
[cn-12:4410] Signal: Aborted (6)
[cn-12:4410] *** End of error message ***
""")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT


def test_mpiruns_report_with_an_empty_node_name_still_names_the_rank() -> None:
    d = diag(
        "mpirun noticed that process rank 3 with PID 0 on node exited on signal 11 "
        "(Segmentation fault)."
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == [3]
    assert d.culprit_hosts == []


def test_a_ucx_signal_handler_prefix_names_the_crashing_host() -> None:
    d = diag(
        "[gpu-a-7:91824:0:91901] Caught signal 11 (Segmentation fault: address not mapped "
        "to object at address 0x8)"
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_hosts == ["gpu-a-7"]


def test_a_localized_shell_kill_message_is_a_weak_host_oom() -> None:
    for text in (
        "step 400 loss 1.92\n已杀死",
        "/var/spool/slurmd/job77/slurm_script: 行 9: 31337 已杀死      python train.py",
        "epoch 3 done\n強制終了",
    ):
        d = diag(text)
        assert d.fault_class is FaultClass.MEMORY_HOST_OOM, text
        assert d.action is not RecoveryAction.STOP, text


def test_a_localized_kill_word_inside_a_sentence_is_nothing() -> None:
    d = diag("训练进程已杀死后自动重启")
    assert d.fault_class is FaultClass.UNKNOWN


# -- pass 6: families validation-7 showed -----------------------------------------------------


def test_a_peer_on_the_reporting_host_is_a_local_process_not_a_lost_node() -> None:
    for peer in ("dgx-4.cluster.internal<40001>", "dgx-4-ib<40001>", "DGX-4<40001>"):
        d = diag(f"dgx-4:501:620 [2] NCCL WARN Net : Connection closed by remote peer {peer}")
        assert d.fault_class is not FaultClass.NODE_LOST, peer
        assert d.culprit_hosts == [], peer


def test_a_peer_on_another_host_closing_still_reads_as_that_node_lost() -> None:
    d = diag("dgx-4:501:620 [2] NCCL WARN Net : Connection closed by remote peer dgx-41<40001>")
    assert d.fault_class is FaultClass.NODE_LOST
    assert d.culprit_hosts == ["dgx-41"]


def test_coordination_service_heartbeat_timeout_is_a_collective_timeout() -> None:
    d = diag(
        "E0301 02:11:09.512 coordination_service.cc:1170] /job:jax_worker/replica:0/task:5 has"
        " been set to ERROR in coordination service: UNAVAILABLE: Task"
        " /job:jax_worker/replica:0/task:5 heartbeat timeout. This indicates that the remote"
        " task has failed, got preempted, or crashed unexpectedly."
    )
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT


def test_heartbeat_timeout_with_the_task_s_own_oom_is_the_oom() -> None:
    d = diag("""
E0301 02:11:09.512 coordination_service.cc:1170] Task /job:jax_worker/replica:0/task:5 heartbeat timeout.
jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 25769803776 bytes.
""")
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM


def test_a_lost_spooled_batch_script_is_the_node_s_storage_not_the_job() -> None:
    d = diag(
        "slurmstepd-gpu07: error: execve(): /var/spool/slurmd/job311/slurm_script: Stale file handle"
    )
    assert d.fault_class is FaultClass.STORAGE_ERROR
    assert d.culprit_hosts == ["gpu07"]


def test_a_program_the_srun_line_names_but_the_node_lacks_is_the_job_s_error() -> None:
    d = diag("slurmstepd: error: execve(): torchrun: No such file or directory")
    assert d.fault_class is FaultClass.APP_ERROR


def test_an_openmmlab_runner_line_names_the_host_of_a_later_crash() -> None:
    d = diag("""
2023-05-02 09:00:01,002 - mmseg - INFO - Start running, host: bob@a100-node-3, work_dir: /w/run1
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 1 (pid: 4242) of binary: /usr/bin/python
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert (d.culprit_ranks, d.culprit_hosts) == ([1], ["a100-node-3"])


# -- preemption announced by the cloud, outside any scheduler -------------------------------


def test_a_cloud_termination_notice_for_a_spot_machine_is_a_preemption() -> None:
    d = diag("""
Epoch 3: 41%|████      | 812/1980 [12:01<17:18, 1.12it/s, loss=2.31]
2024/12/17 16:03:58 GCP Metadata Service says termination is imminent
systemd-logind Power key pressed.
""")
    assert d.fault_class is FaultClass.JOB_PREEMPTED
    assert (d.culprit_ranks, d.culprit_hosts) == ([], [])


def test_the_training_loop_announcing_its_own_end_is_no_preemption() -> None:
    d = diag("INFO trainer: termination is imminent, max_steps reached; saving final model")
    assert d.fault_class is not FaultClass.JOB_PREEMPTED


# -- other batch schedulers' word for how the job ended ------------------------------------


def test_pbs_killing_a_job_at_its_walltime_is_a_time_limit() -> None:
    d = diag("""
iter 81200: loss 1.9812, time 402.13ms
=>> PBS: job killed: walltime 86415 exceeded limit 86400
mpiexec: Warning: task 0 died with signal 15 (Terminated)
""")
    assert d.fault_class is FaultClass.JOB_TIME_LIMIT


def test_lsf_s_termination_reason_names_the_outcome() -> None:
    assert diag("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.").fault_class is (
        FaultClass.MEMORY_HOST_OOM
    )
    assert diag("TERM_PREEMPT: job killed after preemption.").fault_class is (
        FaultClass.JOB_PREEMPTED
    )
    assert diag("TERM_OWNER: job killed by owner.").fault_class is FaultClass.JOB_CANCELLED


def test_grid_engine_s_hard_wallclock_is_a_time_limit_its_soft_one_is_not() -> None:
    hard = diag("job 4412871.1 exceeded hard wallclock time - initiate terminate method")
    assert hard.fault_class is FaultClass.JOB_TIME_LIMIT
    soft = diag("job 4412871.1 exceeded soft wallclock time - initiate soft notify method")
    assert soft.fault_class is not FaultClass.JOB_TIME_LIMIT


# -- a DataLoader worker that exited with a status of its own was not killed ----------------


def test_a_worker_exiting_with_its_own_status_is_its_exception_not_a_host_oom() -> None:
    d = diag("""
Traceback (most recent call last):
  File "/work/data.py", line 88, in __getitem__
    label = record["labels"]
KeyError: 'labels'
RuntimeError: DataLoader worker (pid(s) 4444) exited unexpectedly with exit code 1. Details are lost due to multiprocessing. Rerunning with num_workers=0 may give better error trace.
""")
    assert d.fault_class is FaultClass.APP_ERROR


def test_a_worker_that_vanished_is_still_read_as_killed() -> None:
    d = diag("RuntimeError: DataLoader worker (pid(s) 1234, 1235) exited unexpectedly")
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
