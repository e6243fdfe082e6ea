"""Failure shapes of other launchers, schedulers' tables and libraries, as real logs print them:
the class each means and the rank and host each names."""

from __future__ import annotations

from resurrect.contracts import Diagnosis, FaultClass, RecoveryAction
from resurrect.rules import diagnose_lines, load_engine
from resurrect.rules.text import split_prefixes

ENGINE = load_engine()


def diag(text: str) -> Diagnosis:
    return diagnose_lines(text.strip("\n").splitlines(), file="job.log", engine=ENGINE)


# -- where a line came from ------------------------------------------------------------------


def test_pdsh_host_prefixes_name_the_host() -> None:
    for line, host in (
        ("worker-1: RuntimeError: x", "worker-1"),
        ("10.0.0.12: Traceback (most recent call last):", "10.0.0.12"),
        ("node017: [rank3]: ValueError: x", "node017"),
        ("gpu-node-3.cluster.local: Traceback", "gpu-node-3.cluster.local"),
    ):
        assert split_prefixes(line).host == host, line
    assert split_prefixes("node017: [rank3]: ValueError: x").rank == 3


def test_ucx_signal_handler_prefixes_name_the_host() -> None:
    for line, host in (
        ("[gpu-a-7:91824:0:91901] Caught signal 11 (Segmentation fault)", "gpu-a-7"),
        ("[09677202c889:5283 :0:5704] Caught signal 7 (Bus error)", "09677202c889"),
    ):
        assert split_prefixes(line).host == host, line
    assert split_prefixes("[12:30:45:123] Caught signal 11").host is None


def test_words_with_numbers_are_no_host_prefix() -> None:
    for line in (
        "epoch3: loss 1.2",
        "step100: done",
        "rank0: ready",
        "python3: can't open file 'train.py'",
        "python3.10: error",
        "libcuda.so.1: cannot open shared object file",
        "utf-8: invalid byte",
        "ValueError: bad value",
        "Epoch 1: 30%",
        "mlx5: gpu-3: got completion with error:",
        "ib0: Link down",
        "enp94s0: renamed from eth0",
    ):
        assert split_prefixes(line).host is None, line


def test_deepspeed_multi_node_failure_names_the_pdsh_host() -> None:
    d = diag("""
worker-0: [2024-01-01 10:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1234
worker-1: Traceback (most recent call last):
worker-1:   File "train.py", line 10, in <module>
worker-1: RuntimeError: CUDA error: an illegal memory access was encountered
""")
    assert d.fault_class is FaultClass.CUDA_ERROR
    assert d.culprit_hosts == ["worker-1"]


def test_a_root_cause_record_pasted_without_its_header_names_rank_and_host() -> None:
    d = diag("""
  time      : 2024-05-01_10:00:00
  host      : gpu-node-3
  rank      : 5 (local_rank: 1)
  exitcode  : 1 (pid: 4567)
  error_file: /tmp/torchelastic_x/error.json
  traceback : Traceback (most recent call last):
    File "train.py", line 10, in main
  NameError: name 'foo' is not defined
""")
    assert d.fault_class is FaultClass.APP_ERROR
    assert (d.culprit_ranks, d.culprit_hosts) == ([5], ["gpu-node-3"])


def test_a_host_named_only_on_nccl_info_lines_is_found_by_process_id() -> None:
    d = diag("""
0: g1002:2128869:2128880 [0] NCCL INFO Setting affinity for GPU 0 to ffff0000
1: g1003:77:90 [0] NCCL INFO Setting affinity for GPU 0 to ffff0000
0: Fatal Python error: Segmentation fault
0: E0909 14:03:50.013000 2257 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: -11) local_rank: 0 (pid: 2128869) of binary: /usr/bin/python
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert (d.culprit_ranks, d.culprit_hosts) == ([0], ["g1002"])


def test_the_largest_communicators_init_lines_map_ranks_to_hosts() -> None:
    d = diag("""
node-a:11:20 [1] NCCL INFO comm 0x55 rank 1 nranks 2 cudaDev 1 busId 1b000 commId 0x1 - Init COMPLETE
node-a:11:20 [1] NCCL INFO comm 0x56 rank 1 nranks 4 cudaDev 1 busId 1b000 commId 0x2 - Init COMPLETE
node-b:12:21 [1] NCCL INFO comm 0x57 rank 3 nranks 4 cudaDev 1 busId 1b000 commId 0x2 - Init COMPLETE
node-b:12:21 [1] NCCL INFO comm 0x58 rank 1 nranks 2 cudaDev 1 busId 1b000 commId 0x3 - Init COMPLETE
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
""")
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM
    assert (d.culprit_ranks, d.culprit_hosts) == ([3], ["node-b"])


# -- Open MPI ----------------------------------------------------------------------------------


def test_mpirun_names_the_rank_and_node_a_fatal_signal_killed() -> None:
    d = diag(
        "mpirun noticed that process rank 1 with PID 4567 on node gpu02 exited on signal 11 "
        "(Segmentation fault)."
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert (d.culprit_ranks, d.culprit_hosts) == ([1], ["gpu02"])


def test_orte_losing_a_remote_daemon_is_a_lost_node() -> None:
    d = diag("""
ORTE has lost communication with a remote daemon.

  HNP daemon   : [[12345,0],0] on node node01
  Remote daemon: [[12345,0],1] on node node02
""")
    assert d.fault_class is FaultClass.NODE_LOST
    assert d.culprit_hosts == ["node02"]


def test_horovod_stall_and_shutdown_are_symptoms_of_another_failure() -> None:
    stall = (
        "[2024-01-01 10:00:00.000000: W stall_inspector.cc:107] One or more tensors were "
        "submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for "
        "remainder of ranks for more than 60 seconds."
    )
    assert diag(stall).fault_class is FaultClass.COLLECTIVE_TIMEOUT
    d = diag(
        stall + "\n[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"
    )
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM


# -- the scheduler's own table ----------------------------------------------------------------


def test_sacct_rows_pasted_into_a_log_say_how_the_job_ended() -> None:
    header = (
        "       JobID    JobName      State ExitCode\n------------ ---------- ---------- --------\n"
    )
    for row, want in (
        ("123456            train OUT_OF_ME+    0:125", FaultClass.MEMORY_HOST_OOM),
        ("123456            train  NODE_FAIL      1:0", FaultClass.NODE_LOST),
        ("123456            train    TIMEOUT      0:0", FaultClass.JOB_TIME_LIMIT),
        ("123456            train  PREEMPTED      0:0", FaultClass.JOB_PREEMPTED),
        ("123456            train CANCELLED+      0:0", FaultClass.JOB_CANCELLED),
    ):
        assert diag(header + row).fault_class is want, row


def test_the_batch_steps_cancellation_under_a_timed_out_job_stays_a_time_limit() -> None:
    d = diag("""
123456            train    TIMEOUT      0:0
123456.batch      batch  CANCELLED     0:15
""")
    assert d.fault_class is FaultClass.JOB_TIME_LIMIT


# -- fabrics other than NCCL's classic IB words -------------------------------------------------


def test_newer_nccl_ib_completion_status_names_are_fabric_failures() -> None:
    d = diag(
        "node5:123:456 [2] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<40000> with "
        "status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 vendor err 129 (Send) hca mlx5_0"
    )
    assert d.fault_class is FaultClass.NETWORK_FABRIC


def test_efa_libfabric_errors_are_fabric_failures() -> None:
    d = diag("[rank5]: RuntimeError: NCCL error: NET/OFI Unable to read completion queue entries")
    assert d.fault_class is FaultClass.NETWORK_FABRIC
    assert d.culprit_ranks == [5]


def test_an_ib_link_down_in_the_kernel_log_names_its_host() -> None:
    d = diag("Nov 29 19:00:00 gpu-3 kernel: mlx5_core 0000:5e:00.0 ibp94s0: Link down")
    assert d.fault_class is FaultClass.NETWORK_FABRIC
    assert d.culprit_hosts == ["gpu-3"]


def test_a_jax_barrier_past_its_deadline_is_a_collective_timeout() -> None:
    d = diag(
        "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. "
        "Barrier_id: PjRT_Client_Connect."
    )
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT


# -- the job's own failures ----------------------------------------------------------------------


def test_a_rocm_memory_access_fault_is_a_cuda_error() -> None:
    d = diag("""
Memory access fault by GPU node-2 (Agent handle: 0x55d5c5a0c850) on address 0x7f0b5c600000. Reason: Page not present or supervisor privilege.
Aborted (core dumped)
""")
    assert d.fault_class is FaultClass.CUDA_ERROR
    assert d.culprit_gpus == []


def test_diverged_training_is_an_application_error_with_its_rank_and_node() -> None:
    d = diag(
        "RuntimeError: Rank 3: found NaN in local grad norm in backward pass before data-parallel "
        "communication collective. Device: 3, node: gpu-node-2"
    )
    assert d.fault_class is FaultClass.APP_ERROR
    assert (d.culprit_ranks, d.culprit_hosts) == ([3], ["gpu-node-2"])
    scale = diag(
        "Exception: Current loss scale already at minimum - cannot decrease scale anymore."
    )
    assert scale.fault_class is FaultClass.APP_ERROR
    assert scale.action is RecoveryAction.STOP


def test_a_bare_exception_and_a_device_mismatch_are_application_errors() -> None:
    assert diag("Exception: something bad happened").fault_class is FaultClass.APP_ERROR
    d = diag(
        "[rank2]: RuntimeError: Expected all tensors to be on the same device, but found at "
        "least two devices, cuda:2 and cpu!"
    )
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == [2]


def test_compiler_failures_and_file_descriptor_exhaustion_are_application_errors() -> None:
    for line in (
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:",
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072",
        "OSError: [Errno 24] Too many open files",
    ):
        assert diag(line).fault_class is FaultClass.APP_ERROR, line


def test_truncated_checkpoints_are_storage_errors() -> None:
    for line in (
        "safetensors_rust.SafetensorsError: Error while deserializing header: "
        "MetadataIncompleteBuffer",
        "_pickle.UnpicklingError: pickle data was truncated",
    ):
        assert diag(line).fault_class is FaultClass.STORAGE_ERROR, line


def test_a_container_exiting_137_is_a_weak_host_oom() -> None:
    d = diag("trainer-1 exited with code 137")
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.action is RecoveryAction.RESTART


def test_a_ray_actor_whose_node_died_is_a_lost_node() -> None:
    d = diag("The actor is dead because its node has died. Node Id: 4a3c1e")
    assert d.fault_class is FaultClass.NODE_LOST


# -- shapes validation-3 showed (fixed after its untouched score) ------------------------------


def test_a_headerless_record_before_the_root_cause_section_is_not_the_root_cause() -> None:
    d = diag("""
  host      : node-a
  rank      : 7 (local_rank: 7)
  exitcode  : 1 (pid: 4227)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  host      : node-a
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 4220)
""")
    assert d.fault_class is FaultClass.UNKNOWN
    assert (d.culprit_ranks, d.culprit_hosts) == ([0], ["node-a"])
    assert "rank 0 failed first on node-a" in d.summary


def test_a_log_formatters_rank_field_names_the_rank() -> None:
    d = diag("[] [rank=2] RuntimeError: CUDA out of memory. Tried to allocate 824.00 MiB")
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM
    assert d.culprit_ranks == [2]


def test_rays_raylet_oom_summary_names_the_node() -> None:
    d = diag(
        "(raylet) node_manager.cc:3277: 2 Workers (tasks / actors) killed due to memory pressure "
        "(OOM), 0 Workers crashed due to other reasons at node (ID: 8289f8, IP: 172.24.0.226)"
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.culprit_hosts == ["172.24.0.226"]


def test_the_verbs_providers_completion_error_is_a_fabric_failure() -> None:
    d = diag("(LLMRayActor pid=9, ip=172.19.24.110) mlx5: host_unknown: got completion with error:")
    assert d.fault_class is FaultClass.NETWORK_FABRIC


def test_a_watchdog_report_wrapped_by_the_log_collector_is_still_a_collective_timeout() -> None:
    d = diag("""
job.cn-d003 [stderr] [rank3]:[E909 09:55:46.996 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank 3] Timeout at NCCL work: 2070, last enqueued
NCCL work: 2082, last completed NCCL work: 2069.
""")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT


def test_mpiruns_first_failed_process_is_named_when_nothing_else_is() -> None:
    d = diag("""
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[29973,1],3]
  Exit code:    1
""")
    assert d.fault_class is FaultClass.UNKNOWN
    assert d.culprit_ranks == [3]


# -- mpirun's interleaved output and the ranks its signal handlers frame ----------------------


def test_a_tag_inside_a_line_hands_the_rest_of_it_to_that_rank() -> None:
    interleaved = split_prefixes(
        "[1,2]<stderr>:[hpc-03:18405] [ 0] [1,0]<stderr>:  what():  cudaEventQuery failed"
    )
    assert (interleaved.rank, interleaved.host) == (0, None)
    assert interleaved.body == " what():  cudaEventQuery failed"
    timestamped = split_prefixes("Thu Aug 29 16:41:02 2019[3]<stderr>:x [5]<stdout>:RuntimeError")
    assert (timestamped.rank, timestamped.body) == (5, "RuntimeError")
    # the same rank's tag again: the line's host is still that process's
    same = split_prefixes("[1,3]<stderr>:[mlc-23:3070] [ 8] [1,3]<stderr>:/lib/libc.so(+0x25)")
    assert (same.rank, same.host, same.body) == (3, "mlc-23", "/lib/libc.so(+0x25)")
    # a word that only looks like the tag's end is no tag
    assert split_prefixes("[1,4]<stderr>:reading [2]<stdin> failed").rank == 4


def test_every_rank_an_interleaved_device_error_reaches_is_named() -> None:
    d = diag("""
[1,0]<stderr>:terminate called after throwing an instance of 'std::logic_error'
[1,2]<stderr>:terminate called after throwing an instance of 'std::logic_error'
[1,2]<stderr>:  what():  cudaEventQuery failed: an illegal memory access was encountered
[1,2]<stderr>:[hpc-03:18405] *** Process received signal ***
[1,2]<stderr>:[hpc-03:18405] Signal: Aborted (6)
[1,2]<stderr>:[hpc-03:18405] [ 0] [1,0]<stderr>:  what():  cudaEventQuery failed: an illegal memory access was encountered
[1,0]<stderr>:[hpc-03:18363] *** Process received signal ***
""")
    assert d.fault_class is FaultClass.CUDA_ERROR
    assert sorted(d.culprit_ranks) == [0, 2]
    assert d.culprit_hosts == ["hpc-03"]


def test_ranks_whose_own_handler_framed_a_crash_join_mpiruns_first_failure() -> None:
    d = diag("""
[1,2]<stderr>:[gn05:194927] [20] [1,2]<stderr>:/usr/lib64/libc.so.6(__libc_start_main+0xf5)[0x2a]
[1,2]<stderr>:[gn05:194927] *** End of error message ***
[1,5]<stderr>:[gn05:194990] *** Process received signal ***
[1,5]<stderr>:[gn05:194990] Signal: Aborted (6)
[1,5]<stderr>:[gn05:194990] *** End of error message ***
--------------------------------------------------------------------------
mpirun noticed that process rank 1 with PID 0 on node gn05 exited on signal 11 (Segmentation fault).
--------------------------------------------------------------------------
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    # rank 5 aborted (a teardown): its handler's frame is no crash of its own
    assert d.culprit_ranks == [1, 2]
    assert d.culprit_hosts == ["gn05"]


def test_a_crash_named_by_no_rank_gains_none_from_handler_frames() -> None:
    d = diag("""
[gn05:194927] *** Process received signal ***
[gn05:194927] Signal: Segmentation fault (11)
[gn05:194927] *** End of error message ***
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == []


def test_a_ray_actor_lost_with_its_node_names_the_ip_its_field_block_prints() -> None:
    d = diag("""
ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.
\tclass_name: RayTrainWorker
\tactor_id: 4473bb2424de8ebfec88acc402000000
\tpid: 6420
\tip: 10.72.56.3
The actor is dead because its node has died. Node Id: 677df2a9020c5db45e755b0078c469e2
""")
    assert d.fault_class is FaultClass.NODE_LOST
    assert d.culprit_hosts == ["10.72.56.3"]
    # a field block far above the death reason belongs to another report
    far = diag(
        "\tip: 10.0.0.9\n"
        + "step 1 loss 0.5\n" * 12
        + "The actor is dead because its node has died."
    )
    assert far.fault_class is FaultClass.NODE_LOST
    assert far.culprit_hosts == []
