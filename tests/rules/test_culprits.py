"""Where the culprit comes from: every shape a launcher, a library or a probe names it in fills
the one diagnosis' culprit ranks and hosts; host names the job printed never drain alone."""

from __future__ import annotations

from support.decisions import decision_for

from resurrect.contracts import (
    Diagnosis,
    Evidence,
    FaultClass,
    JobInfo,
    JobPolicy,
    JobState,
    NodeInfo,
    RecoveryAction,
    SignalKind,
)
from resurrect.rules import attribute, diagnose_lines, load_engine

ENGINE = load_engine()


def diag(text: str) -> Diagnosis:
    return diagnose_lines(text.strip("\n").splitlines(), file="job.log", engine=ENGINE)


ROOT_CAUSE_NAME_ERROR = """
[rank5]: NameError: name 'model_cfg' is not defined
[rank2]: RuntimeError: Expected all tensors to be on the same device
E0301 10:00:09.000 77 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 991) of binary: /usr/bin/python
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-03-01_10:00:08
  host      : gpu-b07.cluster
  rank      : 5 (local_rank: 1)
  exitcode  : 1 (pid: 991)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_an_exception_in_the_root_cause_block_names_its_rank_and_host() -> None:
    d = diag(ROOT_CAUSE_NAME_ERROR)
    assert d.fault_class is FaultClass.APP_ERROR
    assert (d.culprit_ranks, d.culprit_hosts) == ([5], ["gpu-b07.cluster"])
    assert "host gpu-b07.cluster; rank 5" in d.summary


def test_an_indented_exception_in_the_root_cause_traceback_is_an_app_error() -> None:
    d = diag("""
Root Cause (first observed failure):
[0]:
  host      : node3
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 12)
  traceback : Traceback (most recent call last):
    File "train.py", line 40, in main
      model = build(model_cfg)
  NameError: name 'model_cfg' is not defined
""")
    assert d.fault_class is FaultClass.APP_ERROR
    assert (d.culprit_ranks, d.culprit_hosts) == ([2], ["node3"])


def test_the_decisive_line_names_the_rank_not_another_ranks_weaker_line() -> None:
    d = diag("""
[rank0]: RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)
[rank3]: ValueError: too many values to unpack (expected 2)
""")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == [3]


def test_argparse_rejecting_the_command_line_is_an_app_error_of_the_first_failed_rank() -> None:
    d = diag("""
usage: train.py [-h] [--lr LR] [--epochs EPOCHS]
train.py: error: unrecognized arguments: --local-rank=0
usage: train.py [-h] [--lr LR] [--epochs EPOCHS]
train.py: error: unrecognized arguments: --local-rank=1
E1130 12:13:49.388000 1243 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 2) local_rank: 0 (pid: 1250) of binary: /usr/bin/python3
""")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP
    assert d.culprit_ranks == [0]


def test_a_checkpoint_write_failing_in_the_file_system_is_a_storage_error() -> None:
    for line in (
        "RuntimeError: [enforce fail at inline_container.cc:588] . PytorchStreamWriter failed "
        "writing file data/4: file write failed",
        "[rank0]: RuntimeError: [enforce fail at inline_container.cc:325] . unexpected pos "
        "1601216832 vs 1601216720",
    ):
        d = diag(line)
        assert d.fault_class is FaultClass.STORAGE_ERROR, line


def test_a_bus_error_in_a_dataloader_worker_is_a_crash_not_a_host_oom() -> None:
    d = diag("""
ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
Traceback (most recent call last):
RuntimeError: DataLoader worker (pid 3345) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.action is not RecoveryAction.DRAIN_AND_RESTART
    killed = diag("RuntimeError: DataLoader worker (pid 40512) is killed by signal: Killed.")
    assert killed.fault_class is FaultClass.MEMORY_HOST_OOM


def test_timeouts_on_several_ranks_of_one_node_in_older_words_are_a_collective_timeout() -> None:
    d = diag("""
node7:881:990 [0] NCCL INFO comm 0x55 rank 0 nranks 4 cudaDev 0 busId 1000 - Init COMPLETE
[E ProcessGroupNCCL.cpp:1182] [Rank 0] Timeout at NCCL work: 5121, last enqueued NCCL work: 5121, last completed NCCL work: 5120.
[E ProcessGroupNCCL.cpp:1182] [Rank 2] Timeout at NCCL work: 5121, last enqueued NCCL work: 5121, last completed NCCL work: 5120.
[E ProcessGroupNCCL.cpp:1182] [Rank 3] Timeout at NCCL work: 5121, last enqueued NCCL work: 5121, last completed NCCL work: 5119.
""")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == [3]


def test_sigint_to_the_launcher_after_progress_stopped_is_a_hang() -> None:
    stalled = diag("""
Epoch 0:  41%|####      | 410/1000 [12:01<17:17,  1.76s/it, loss=2.31]
^CW1130 12:13:49.388000 1243 torch/distributed/elastic/agent/server/api.py:704] Received 2 death signal, shutting down workers
""")
    assert stalled.fault_class is FaultClass.JOB_HANG
    assert "progress stopped" in stalled.summary
    scancel = diag("""
Epoch 0:  41%|####      | 410/1000 [12:01<17:17,  1.76s/it, loss=2.31]
W1130 12:13:49.388000 1243 torch/distributed/elastic/agent/server/api.py:704] Received 15 death signal, shutting down workers
""")
    assert scancel.fault_class is FaultClass.JOB_CANCELLED


def test_srun_names_the_task_and_node_that_ran_out_of_memory() -> None:
    d = diag("""
slurmstepd: error: Detected 1 oom_kill event in StepId=881.0. Some of the step tasks have been OOM Killed.
srun: error: gpu-a012: task 5: Out Of Memory
srun: error: gpu-a011: task 1: Killed
""")
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert (d.culprit_ranks, d.culprit_hosts) == ([5], ["gpu-a012"])


def test_deepspeed_launcher_names_the_killed_local_rank() -> None:
    d = diag(
        "[2024-03-01 10:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', "
        "'-u', 'train.py', '--local_rank=3', '--deepspeed'] exits with return code = -9"
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.culprit_ranks == [3]


def test_nccl_and_ray_prefixes_name_the_host() -> None:
    nccl = diag(
        "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'"
    )
    assert nccl.culprit_hosts == ["ng30903"]
    ray = diag(
        "(pid=4411, ip=10.0.0.7) RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert ray.fault_class is FaultClass.CUDA_ERROR
    assert ray.culprit_hosts == ["10.0.0.7"]


def test_processgroupnccl_rank_tag_names_the_rank() -> None:
    d = diag(
        "[E ProcessGroupNCCL.cpp:916] [Rank 1] NCCL watchdog thread terminated with exception: "
        "CUDA error: uncorrectable ECC error encountered"
    )
    assert d.culprit_ranks == [1]
    other_group = diag(
        "[E ProcessGroupNCCL.cpp:916] [PG 3 Rank 1] Process group watchdog thread terminated with"
        " exception: CUDA error: an illegal memory access was encountered"
    )
    assert other_group.culprit_ranks == []


# -- probes: stacks, Flight Recorder, GPU readings ------------------------------------------


def stack(rank: int, host: str, place: str, culprit: bool) -> Evidence:
    what = "culprit" if culprit else "victim"
    return Evidence(
        kind=SignalKind.STACK_DUMP,
        text=f"{what}: rank {rank} on {host} (pid 9, state T): {place} at main (train.py:80)",
        rule=f"stacks.{place}",
        role="root" if culprit else "diagnostic",
        fault_class=FaultClass.JOB_HANG if culprit else None,
        host=host,
        rank=rank,
        confidence=0.9 if culprit else None,
    )


def test_a_hang_names_the_culprit_its_stack_dump_found_not_every_node() -> None:
    d = attribute([stack(0, "node1", "collective", False), stack(1, "node2", "stopped", True)])
    assert d.fault_class is FaultClass.JOB_HANG
    assert (d.culprit_ranks, d.culprit_hosts) == ([1], ["node2"])
    assert "node1" not in d.summary


def test_a_flight_recorder_finding_names_the_rank_behind() -> None:
    behind = Evidence(
        kind=SignalKind.STACK_DUMP,
        text="rank 6 on node4 is behind: ALLREDUCE #811 while its peers are at #812",
        rule="flight_recorder.behind",
        host="node4",
        rank=6,
        source="job_output",
    )
    timeouts = diag("""
[rank0]:[E0101 10:00:07.5 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.
[rank1]:[E0101 10:00:07.5 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.
""")
    d = attribute([*timeouts.cascade, *timeouts.evidence, behind])
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert (d.culprit_ranks, d.culprit_hosts) == ([6], ["node4"])


def test_a_gpu_reading_names_rank_host_and_gpu() -> None:
    lost = Evidence(
        kind=SignalKind.GPU_EVENT,
        text="nvml gpu=2 pci=0000:3b:00.0 lost",
        rule="gpu.nvml.lost",
        role="root",
        fault_class=FaultClass.GPU_HARDWARE,
        host="node2",
        rank=10,
        gpu="2",
        source="node_agent",
    )
    d = attribute([lost])
    assert (d.culprit_ranks, d.culprit_hosts, d.culprit_gpus) == ([10], ["node2"], ["2"])


# -- job output labels, never drains alone ---------------------------------------------------


def job(nodes: list[str]) -> JobInfo:
    return JobInfo(job_id="41", name="train", user="alice", state=JobState.FAILED, nodes=nodes)


def test_a_host_named_only_by_job_output_labels_the_diagnosis_but_is_not_drained() -> None:
    d = diag("""
Root Cause (first observed failure):
[0]:
  host      : node2
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 12)
[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered
""")
    assert d.fault_class is FaultClass.GPU_HARDWARE
    assert d.culprit_hosts == ["node2"]
    alone = decision_for(d, job(["node1", "node2"]), JobPolicy(), charged_restarts=0)
    assert alone.drain_nodes == []
    assert any("only the job's output names it" in r for r in alone.reasons)
    slurm_agrees = decision_for(
        d,
        job(["node1", "node2"]),
        JobPolicy(),
        charged_restarts=0,
        nodes=[NodeInfo(name="node2", state="DOWN", reason="Not responding")],
    )
    assert slurm_agrees.drain_nodes == ["node2"]


# -- shapes the second validation set showed (added after its untouched score) ---------------


def test_srun_task_ranges_name_every_task() -> None:
    d = diag("""
slurmstepd: error: Detected 1 oom_kill event in StepId=440575.0. Some of the step tasks have been OOM Killed.
srun: error: nid001277: tasks 1-3: Out Of Memory
""")
    assert (d.culprit_ranks, d.culprit_hosts) == ([1, 2, 3], ["nid001277"])


def test_slurmstepd_killing_a_job_over_its_memory_limit_is_a_host_oom() -> None:
    d = diag("""
slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being killed
slurmstepd: error: *** JOB 7518 ON xantipa CANCELLED AT 2022-06-10T17:11:35 ***
""")
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM


def test_legacy_launchers_name_the_local_rank_of_the_worker_command() -> None:
    segv = diag(
        "subprocess.CalledProcessError: Command '['/usr/bin/python3', '-u', 'train.py', "
        "'--local_rank=7', '--epochs', '9']' died with <Signals.SIGSEGV: 11>."
    )
    assert (segv.fault_class, segv.culprit_ranks) == (FaultClass.PROCESS_CRASH, [7])
    spawn = diag("""
-- Process 2 terminated with the following error:
Traceback (most recent call last):
OSError: [Errno 28] No space left on device
""")
    assert (spawn.fault_class, spawn.culprit_ranks) == (FaultClass.STORAGE_ERROR, [2])


def test_an_unexplained_exit_still_names_the_rank_the_launcher_reports() -> None:
    d = diag(
        "[ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
        "'--local_rank=4', '--do_train'] exits with return code = 1"
    )
    assert d.fault_class is FaultClass.UNKNOWN
    assert (d.culprit_ranks, d.culprit_hosts) == ([4], [])


def test_ray_names_the_dead_workers_ip_and_train_rank() -> None:
    d = diag("""
(raylet) A worker died or was killed while executing a task by an unexpected system error. Worker IP address: 10.0.7.57 Worker port: 10046 Worker PID: 89513 Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called.
(TorchTrainer pid=89392) Worker 0 has failed.
""")
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert (d.culprit_ranks, d.culprit_hosts) == ([0], ["10.0.7.57"])


def test_every_rank_aborting_names_the_launchers_first_failure() -> None:
    d = diag("""
Failures:
[1]:
  host      : n1
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 11)
Root Cause (first observed failure):
[0]:
  host      : n1
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 10)
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert (d.culprit_ranks, d.culprit_hosts) == ([0], ["n1"])


def test_an_ib_peer_with_an_ipv6_zone_is_a_fabric_failure() -> None:
    d = diag(
        "H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from"
        " peer fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, vendor"
        " err 81 (Send)"
    )
    assert d.fault_class is FaultClass.NETWORK_FABRIC


def test_tasks_on_several_nodes_failing_alike_name_no_first_failure() -> None:
    d = diag("""
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 15.78 GiB total capacity)
srun: error: node-b: task 5: Exited with exit code 1
srun: error: node-a: tasks 0-2: Exited with exit code 1
srun: error: node-b: task 4: Exited with exit code 1
""")
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM
    assert (d.culprit_ranks, d.culprit_hosts) == ([], [])


def test_one_node_s_tasks_failing_still_name_the_first_of_them() -> None:
    d = diag("""
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 1; 15.78 GiB total capacity)
srun: error: node-b: task 5: Exited with exit code 1
srun: error: node-b: task 4: Exited with exit code 1
""")
    assert (d.culprit_ranks, d.culprit_hosts) == ([5], ["node-b"])


def test_tasks_failing_differently_name_the_first_failure() -> None:
    d = diag("""
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 1; 15.78 GiB total capacity)
srun: error: node-b: task 5: Exited with exit code 1
srun: error: node-a: task 0: Exited with exit code 2
""")
    assert (d.culprit_ranks, d.culprit_hosts) == ([5], ["node-b"])


def test_a_node_ray_marked_dead_is_named_by_its_ip() -> None:
    d = diag("""
(BaseWorkerMixin pid=5137, ip=10.128.0.103) loss: 2.019226  [ 6400/30000]
2022-02-15 16:53:52,096	WARNING worker.py:1462 -- The node with node id: 8f205b12 and ip: 10.128.0.103 has been marked dead because the detector has missed too many heartbeats from it.
""")
    assert d.fault_class is FaultClass.NODE_LOST
    assert d.culprit_hosts == ["10.128.0.103"]


def test_deepspeed_launcher_reporting_a_fatal_signal_names_the_crashed_local_rank() -> None:
    d = diag("""
[2023-07-20 15:45:13,980] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 3966
[2023-07-20 15:45:13,981] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 3967
[2023-07-20 15:45:13,982] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', '--local_rank=1', '--deepspeed', 'deepspeed.json'] exits with return code = -7
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == [1]
