"""Failure families as stacks other than PyTorch word them (issue 36), in variants the
per-framework validation sets do not contain: each class in the words of TensorFlow, JAX/XLA,
PaddlePaddle, MindSpore, ROCm, Horovod, FUSE mounts and object-store clients, and the launchers'
tags that name the rank or host."""

from __future__ import annotations

import pytest

from resurrect.contracts import Diagnosis, FaultClass, RecoveryAction
from resurrect.rules import diagnose_lines, load_engine

ENGINE = load_engine()


def diag(text: str) -> Diagnosis:
    return diagnose_lines(text.strip("\n").splitlines(), file="job.log", engine=ENGINE)


# -- device OOM in every stack's words -----------------------------------------------------


DEVICE_OOM_IN_EACH_FRAMEWORKS_WORDS = [
    # TensorFlow's op kernel, then the Python exception of TF 2
    "2023-05-02 10:11:12.000001: W tensorflow/core/framework/op_kernel.cc:1830] OP_REQUIRES"
    " failed at conv_ops.cc:684 : RESOURCE_EXHAUSTED: OOM when allocating tensor with"
    " shape[64,256,56,56] and type float on /job:localhost/replica:0/task:0/device:GPU:3"
    " by allocator GPU_3_bfc",
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating"
    " tensor with shape[32,1024,1024] and type half",
    # XLA on GPU (jaxlib) and on TPU
    "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate"
    " 17179869184 bytes.",
    "E0101 00:00:00.000 1 pjrt_stream_executor_client.cc:2985] Execution of replica 3 failed:"
    " RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space"
    " hbm. Used 35.83G of 31.25G hbm. Exceeded hbm capacity by 4.59G.",
    "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Attempting to reserve 2.10G at"
    " the bottom of memory. That was not possible. There are 1.02G free, 0B reserved, and"
    " 1.02G reservable.",
    # PaddlePaddle (newer place wording), MindSpore, ROCm
    "ResourceExhaustedError: Out of memory error on gpu:1. Cannot allocate 3.0GB memory on"
    " gpu:1, available memory is only 120.5MB.",
    "RuntimeError: Device(id:2) memory isn't enough and alloc failed, kernel name:"
    " Default/network/MatMul-op12, alloc size: 1073741824B.",
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total"
    " capacity of 191.98 GiB",
    "RuntimeError: HIP error: hipErrorOutOfMemory",
    # PyTorch's caching allocator on devices other than CUDA
    "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 2.00 GiB (GPU 0; 47.98 GiB"
    " total capacity; 45.01 GiB already allocated)",
    "RuntimeError: MLU out of memory. Tried to allocate 1.00 GiB (MLU 1; 31.99 GiB total"
    " capacity; 30.70 GiB already allocated)",
    # CANN: an NPU allocation that failed, under MindSpore or torch_npu
    "RuntimeError: Call aclrtMalloc failed, ret: 207001",
    # TensorFlow's eager op that could not allocate its output
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: failed to allocate"
    " memory [Op:Mul]",
    # NCCL's driver-API check puts the driver's error code before the message
    "n17:3301:3342 [2] include/alloc.h:103 NCCL WARN Cuda failure 2 'out of memory'",
    # PaddlePaddle Fluid's allocator check (PADDLE_ENFORCE_LE in gpu_info.cc)
    "paddle.fluid.core_avx.EnforceNotMet: enforce allocating <= available failed,"
    " 4294967296 > 2147483648",
    # MindSpore's graph scheduler, its kernel runtime, its Ascend memory adapter
    "RuntimeError: Malloc for kernel output failed, Memory isn't enough,"
    " node:Default/network-TrainOneStepCell/MatMul-op3",
    "RuntimeError: Malloc for kernel output failed, node:Default/Add-op9",
    "RuntimeError: Device memory isn't enough and alloc failed, alloc size:536870912",
    "ValueError: Malloc device memory failed, size[4294967296], ret[207001], Device 3 may be"
    " other processes occupying this card",
    # an XLA:TPU program that never fits one of the chip's memory spaces
    "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error."
    " Ran out of memory in memory space smem. Used 16.02K of 16.00K smem.",
]


@pytest.mark.parametrize(
    ("line", "gpu"),
    [
        # PaddlePaddle's allocator
        (
            "Out of memory error on GPU 3. Cannot allocate 1.5GB memory on GPU 3, 30GB memory"
            " has been allocated and available memory is only 12MB.",
            "3",
        ),
        # PyTorch's caching allocator on an Ascend NPU (torch_npu)
        (
            "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 5; 60.96 GiB total"
            " capacity; 58.01 GiB already allocated; 1.20 GiB free)",
            "5",
        ),
    ],
)
def test_the_allocator_names_the_device_that_ran_out(line: str, gpu: str) -> None:
    d = diag(line)
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM
    assert d.culprit_gpus == [gpu]


DEVICE_ALLOC_FAILURE_IN_GENERIC_WORDS = [
    # Intel GPUs: Level Zero, oneAPI's unified runtime, SYCL's plugin interface
    "RuntimeError: level_zero backend failed with error: 40 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)",
    "[rank3]: RuntimeError: Native API failed. Native API returns: -6 (PI_ERROR_OUT_OF_DEVICE_MEMORY)",
    "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY while allocating the all-gather buffer",
    # "not enough" / "insufficient" device memory, with the device named either way round
    "paddle.fluid.core_avx.EnforceNotMet: Insufficient GPU memory to allocation. at"
    " [/paddle/paddle/fluid/platform/gpu_info.cc:262]",
    "RuntimeError: not enough memory to allocate 3.50 GiB on cuda:2 (0.41 GiB free)",
    "RuntimeError: insufficient device memory for the optimizer states: 12.0 GiB needed, 3.1"
    " GiB free",
]


@pytest.mark.parametrize(
    ("line", "action"),
    [
        *((line, RecoveryAction.STOP) for line in DEVICE_OOM_IN_EACH_FRAMEWORKS_WORDS),
        # the mechanism tier's reading: the class is named, the evidence too weak to stop the job
        *((line, RecoveryAction.RESTART) for line in DEVICE_ALLOC_FAILURE_IN_GENERIC_WORDS),
    ],
)
def test_device_oom_in_each_frameworks_words_stops_the_job_unless_only_generic(
    line: str, action: RecoveryAction
) -> None:
    d = diag(line)
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM, d.summary
    assert d.action is action


def test_the_cpu_allocator_running_short_is_the_host_not_the_device() -> None:
    d = diag(
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough"
        " memory: you tried to allocate 68719476736 bytes."
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM, d.summary


def test_a_tensorflow_tensor_on_the_host_cpu_is_a_host_oom() -> None:
    d = diag(
        "Resource exhausted: OOM when allocating tensor with shape[6040,32] and type float"
        " on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu"
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM


def test_a_bfc_allocator_that_says_it_is_not_a_failure_decides_nothing() -> None:
    d = diag(
        "W bfc_allocator.cc:243] Allocator (GPU_0_bfc) ran out of memory trying to allocate"
        " 2.26GiB with freed_by_count=0. The caller indicates that this is not a failure,"
        " but may mean that there could be performance gains if more memory were available."
    )
    assert d.fault_class is FaultClass.UNKNOWN


def test_a_scoped_vmem_overflow_on_tpu_is_no_device_oom() -> None:
    d = diag(
        "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory in memory space"
        " vmem while allocating on stack for %fusion.18"
    )
    assert d.fault_class is not FaultClass.MEMORY_DEVICE_OOM


# -- storage under a checkpoint ------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "OSError: [Errno 107] Transport endpoint is not connected: '/gcs/ckpt/step_4000/model.pt'",
        "[rank0]: OSError: [Errno 103] Software caused connection abort: '/mnt/s3/run7/optim.pt'",
        "OSError: [Errno 121] Remote I/O error: '/lustre/project/ckpt/latest'",
        "mkdir: cannot create directory '/mnt/blob/ckpt': Transport endpoint is not connected",
        "botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL:"
        ' "https://s3.us-east-1.amazonaws.com/bucket/ckpt/step_100/shard_3.distcp"',
        "botocore.exceptions.ClientError: An error occurred (ServiceUnavailable) when calling the"
        " UploadPart operation (reached max retries: 4): Service Unavailable",
        "tensorflow.python.framework.errors_impl.UnavailableError: Error executing an HTTP"
        " request: HTTP response code 503 with body 'Backend Error' when resuming upload"
        " gs://bucket/train/model.ckpt-2000.data-00000-of-00001",
        "google.api_core.exceptions.TooManyRequests: 429 POST https://storage.googleapis.com/"
        "upload/storage/v1/b/bkt/o?uploadType=resumable: The rate of change requests to the"
        " object is too high",
        "azure.core.exceptions.HttpResponseError: The server is busy. ErrorCode:ServerBusy",
        # TensorFlow refusing a checkpoint file for space or quota (its table writer's wrapper)
        "tensorflow.python.framework.errors_impl.InternalError: Error writing (tmp) checkpoint"
        " file: /scratch/u/run7/model.ckpt-12000.tempstate4411: Resource exhausted:"
        " /scratch/u/run7/model.ckpt-12000.tempstate4411",
        # TensorFlow's RESOURCE_EXHAUSTED from the file system, naming only the file
        "W tensorflow/core/framework/op_kernel.cc:1158] Resource exhausted:"
        " /nfs/exp/ckpt/model.ckpt-500.data-00000-of-00001.tempstate99\n"
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError:"
        " /nfs/exp/ckpt/model.ckpt-500.data-00000-of-00001.tempstate99",
        "ResourceExhaustedError: C:\\runs\\exp3\\model.ckpt-40.tempstate1234",
        # Azure Blob / Data Lake through azure-core: a 500 or 503 error code, or no answer at all
        "azure.core.exceptions.HttpResponseError: (OperationTimedOut) Operation could not be"
        " completed within the specified time.",
        "azure.core.exceptions.ServiceResponseError: ('Connection aborted.', ConnectionResetError(104,"
        " 'Connection reset by peer')) PUT https://trainacct.blob.core.windows.net/runs/r7/ckpt-900.pt",
    ],
)
def test_a_mount_or_object_store_failing_under_the_job_is_a_storage_error(line: str) -> None:
    d = diag(line)
    assert d.fault_class is FaultClass.STORAGE_ERROR, d.summary
    assert d.action is RecoveryAction.RESTART


@pytest.mark.parametrize(
    "line",
    [
        "botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the"
        " PutObject operation: Access Denied",
        "zmq.error.ZMQError: Transport endpoint is not connected",
        "azure.core.exceptions.HttpResponseError: (AuthenticationFailed) Server failed to"
        " authenticate the request.",
        "azure.core.exceptions.ServiceRequestError: Cannot connect to host"
        " login.microsoftonline.com:443",
    ],
)
def test_a_refused_credential_or_a_socket_is_no_storage_failure(line: str) -> None:
    assert diag(line).fault_class is not FaultClass.STORAGE_ERROR


# -- the job's own setup -------------------------------------------------------------------


def test_a_library_the_job_cannot_load_is_an_app_error() -> None:
    d = diag(
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/"
        "nccl_utils.cc:134: NCCL operation ncclGetUniqueId(&id) failed: Unable to load NCCL"
        " library. Multi-GPU collectives will not work."
    )
    assert d.fault_class is FaultClass.APP_ERROR


def test_a_tensorflow_warning_about_an_optional_library_decides_nothing() -> None:
    d = diag(
        "W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load"
        " dynamic library 'libcudnn.so.8'; dlerror: libcudnn.so.8: cannot open shared object"
        " file: No such file or directory"
    )
    assert d.fault_class is FaultClass.UNKNOWN


def test_a_keras_checkpoint_into_a_missing_directory_is_an_app_error() -> None:
    d = diag(
        "OSError: Unable to create file (unable to open file: name = 'out/ckpt/best.h5',"
        " errno = 2, error message = 'No such file or directory', flags = 13, o_flags = 242)"
    )
    assert d.fault_class is FaultClass.APP_ERROR


# -- a shell's job-control words -----------------------------------------------------------


RAY_WORKER_EXIT_SUSPECTS = (
    "(raylet) A worker died or was killed while executing a task by an unexpected system error."
    " To troubleshoot the problem, check the logs for the dead worker. Worker exit type:"
    " SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2."
    " End of file. There are some potential root causes. (1) The process is killed by SIGKILL by"
    " OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is"
    " crashed unexpectedly due to SIGSEGV or other unexpected errors."
)


def test_rays_list_of_suspects_for_a_dead_worker_alone_is_a_weak_host_oom() -> None:
    d = diag(RAY_WORKER_EXIT_SUSPECTS)
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM, d.summary
    assert d.action is RecoveryAction.RESTART


@pytest.mark.parametrize(
    ("cause", "fault_class"),
    [
        ("(TrainWorker pid=4411) Fatal Python error: Segmentation fault", FaultClass.PROCESS_CRASH),
        (
            "(RayTrainWorker pid=912) *** SIGBUS received at time=1714000000 on cpu 3 ***",
            FaultClass.PROCESS_CRASH,
        ),
        (
            "(RayTrainWorker pid=912) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"
            " 1.00 GiB",
            FaultClass.MEMORY_DEVICE_OOM,
        ),
    ],
)
def test_a_cause_the_log_shows_beats_rays_list_of_suspects(
    cause: str, fault_class: FaultClass
) -> None:
    d = diag(f"{cause}\n{RAY_WORKER_EXIT_SUSPECTS}")
    assert d.fault_class is fault_class, d.summary


def test_rays_memory_monitor_killing_the_worker_is_a_host_oom_over_a_crash_it_caused() -> None:
    d = diag(
        "Memory on the node (IP: 10.2.0.8, ID: 51c0) where the task (task ID: 77, name=fit,"
        " pid=3120) was running was 123.40GB / 128.00GB (0.964; threshold 0.95). Ray killed this"
        " worker (ID: 9e1f) because it was the most recently scheduled task\n"
        f"{RAY_WORKER_EXIT_SUSPECTS}"
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM, d.summary


def test_a_shell_job_table_killed_line_is_a_weak_host_oom() -> None:
    d = diag("[2]+  Killed                  python -m trainer --config big.yaml")
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.action is RecoveryAction.RESTART


@pytest.mark.parametrize(
    "text",
    [
        # a progress bar redraws itself with carriage returns and leaves its line unterminated,
        # so the shell's report lands at its end: tqdm, Keras, a plain step counter
        "Training: 37%|###7      | 370/1000 [04:11<07:08,  1.47it/s]Killed",
        "batch 812/2000 [=========>....................] - ETA: 3:02 - loss: 1.0734Killed",
        "epoch 2 step 4400 elapsed 812s已杀死",
    ],
)
def test_a_shells_kill_report_glued_to_a_progress_line_is_a_weak_host_oom(text: str) -> None:
    d = diag("epoch 1 done\n" + text)
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM, d.summary
    assert d.action is RecoveryAction.RESTART


@pytest.mark.parametrize(
    "text",
    [
        "pod status: OOMKilled",
        "the evaluation worker was Killed by the user",
    ],
)
def test_killed_inside_words_or_prose_is_no_shell_kill_report(text: str) -> None:
    d = diag(text)
    assert not any(e.rule == "memory.sigkill_worker" for e in d.evidence), d.summary


@pytest.mark.parametrize(
    ("line", "fault_class"),
    [
        # a wrapper that reports its child's return code (Python's negative signal number) as an
        # "error code", as DIGITS' tasks do
        ("Train Caffe Model task failed with error code -9", FaultClass.MEMORY_HOST_OOM),
        ("Workload exited with error code 137", FaultClass.MEMORY_HOST_OOM),
        ("Train Caffe Model task failed with error code -11", FaultClass.PROCESS_CRASH),
    ],
)
def test_a_wrappers_error_code_for_a_signal_is_read_like_an_exit_code(
    line: str, fault_class: FaultClass
) -> None:
    d = diag(line)
    assert d.fault_class is fault_class, d.summary
    assert d.action is RecoveryAction.RESTART


def test_an_ordinary_error_code_is_no_signal() -> None:
    assert diag("Train Caffe Model task failed with error code 1").fault_class not in {
        FaultClass.MEMORY_HOST_OOM,
        FaultClass.PROCESS_CRASH,
    }


def test_killed_in_a_docker_compose_column_is_a_weak_host_oom() -> None:
    d = diag(
        "trainer_1  | epoch 3 step 1200 loss 2.1\ntrainer_1  | Killed\n"
        "trainer_1 exited with code 137"
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.culprit_hosts == []  # a container name is no node


def test_a_shell_abort_padded_to_its_status_column_is_a_crash() -> None:
    d = diag("./run_pod.sh: line 12: 40111 Aborted                 (core dumped) python3 train.py")
    assert d.fault_class is FaultClass.PROCESS_CRASH


# -- Horovod's stall report and launchers --------------------------------------------------


def test_horovod_missing_ranks_without_the_header_name_the_stalled_rank() -> None:
    d = diag("""
[1,0]<stderr>:[2021-03-01 10:00:00.000000: W horovod/common/stall_inspector.cc:107] HorovodAllreduce_grad_0 [missing ranks: 3]
[1,0]<stderr>:[2021-03-01 10:00:00.000010: W horovod/common/stall_inspector.cc:107] HorovodAllreduce_grad_1 [missing ranks: 3]
""")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == [3]


def test_horovod_ranks_that_caught_up_are_not_culprits() -> None:
    d = diag("""
HorovodAllreduce_loss_0 [missing ranks: 2, 5]
HorovodAllreduce_loss_0 [missing ranks: 5]
""")
    assert d.culprit_ranks == [5]


def test_horovod_ready_ranks_imply_the_lower_rank_that_never_got_ready() -> None:
    d = diag("""
HorovodAllreduce_a_0 [ready ranks: 0, 2, 3]
HorovodAllreduce_b_0 [ready ranks: 0, 2, 3]
""")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == [1]


def test_horovod_stalled_rank_lines_under_mpirun_tags_name_the_stalled_rank() -> None:
    d = diag("""
[1,0]<stderr>:Stalled ranks:
[1,0]<stderr>:4: [horovod_allreduce.7, horovod_allreduce.8]
""")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == [4]


def test_a_root_cause_on_the_stalled_rank_wins_over_the_stall() -> None:
    d = diag("""
[1,2]<stderr>:tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8192,4096]
[1,0]<stderr>:HorovodAllreduce_grads_0 [missing ranks: 2]
""")
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM
    assert d.culprit_ranks == [2]


def test_horovodrun_gloo_tags_name_the_failing_rank() -> None:
    d = diag("""
[0]<stdout>:step 10
[3]<stderr>:Traceback (most recent call last):
[3]<stderr>:  File "train.py", line 9, in <module>
[3]<stderr>:KeyError: 'labels'
Process 3 exit with status code 1.
""")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == [3]


def test_a_timestamp_glued_to_an_mpirun_tag_still_names_the_rank() -> None:
    d = diag(
        "Tue Mar  7 10:00:00 2023[1,7]<stderr>:RuntimeError: CUDA error: an illegal memory"
        " access was encountered"
    )
    assert d.fault_class is FaultClass.CUDA_ERROR
    assert d.culprit_ranks == [7]


def test_an_indented_open_mpi_signal_report_names_its_host() -> None:
    d = diag("""
    [gpu-a17:04211] *** Process received signal ***
    [gpu-a17:04211] Signal: Segmentation fault (11)
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_hosts == ["gpu-a17"]


def test_a_two_field_ucx_signal_prefix_names_its_host() -> None:
    d = diag(
        "[trn-node-4:18812:0] Caught signal 11 (Segmentation fault: address not mapped to"
        " object at address 0x10)"
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_hosts == ["trn-node-4"]


def test_an_orbax_process_tag_names_the_jax_process_index() -> None:
    d = diag(
        "00:28:21.238 [E] [process=3][thread=async_save] OSError: [Errno 107] Transport"
        " endpoint is not connected: '/gcs/run/ckpt/30000.orbax-checkpoint-tmp-0'"
    )
    assert d.fault_class is FaultClass.STORAGE_ERROR
    assert d.culprit_ranks == [3]


def test_a_horovod_shutdown_alone_is_unknown_and_names_mpiruns_first_failed_rank() -> None:
    # the shutdown says some rank raised, not what it raised: no class, but the rank mpirun saw
    # fail first
    d = diag("""
[1,3]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution.
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[4242,1],2]
  Exit code:    1
""")
    assert d.fault_class is FaultClass.UNKNOWN
    assert d.culprit_ranks == [2]


def test_the_first_failure_in_time_wins_when_two_ranks_fail() -> None:
    d = diag("""
[2024-05-01 10:00:05] [1,5]<stderr>:ValueError: bad shard 17
[2024-05-01 10:00:02] [1,1]<stderr>:ValueError: bad shard 3
""")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks[0] == 1


# -- the program refused by the framework, aborts, Paddle's launcher -----------------------


@pytest.mark.parametrize(
    "line",
    [
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:"
        " indices[3,1] = 50001 is not in [0, 50000)",
        "jax.errors.JaxRuntimeError: INVALID_ARGUMENT: Executable expected parameter 0 of size"
        " 4096 but got buffer with incompatible size 2048",
        "tensorflow.python.framework.errors_impl.UnimplementedError: DNN library is not found.",
        "No OpKernel was registered to support Op 'CollectiveReduceV2' used by"
        " {{node CollectiveReduceV2}} with these attrs: [T=DT_HALF]",
        "XlaRuntimeError: INTERNAL: during context [Pre-optimization]: RET_CHECK failure",
    ],
)
def test_a_framework_refusing_the_program_is_an_app_error(line: str) -> None:
    d = diag(line)
    assert d.fault_class is FaultClass.APP_ERROR, d.summary
    assert d.action is RecoveryAction.STOP


def test_a_failed_glog_check_is_a_crash_unless_a_cause_is_printed() -> None:
    crash = diag(
        "F0301 08:00:00.000001  777 gpu_executable.cc:451] Check failed: buffer != nullptr"
    )
    assert crash.fault_class is FaultClass.PROCESS_CRASH
    with_cause = diag("""
F0301 08:00:00.000001  777 stream.cc:88] Check failed: ok CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered
Abort trap: 6
""")
    assert with_cause.fault_class is FaultClass.CUDA_ERROR


def test_a_paddle_dataloader_process_killed_is_a_host_oom() -> None:
    d = diag("SystemError: (Fatal) DataLoader process (pid 88) exited is killed by signal: Killed.")
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM


def test_paddles_launcher_names_the_trainers_that_aborted() -> None:
    d = diag("""
W0101 00:00:00.000000 10 init.cc:205] *** SIGSEGV (@0x0) received by PID 10 (TID 0x7f) from PID 0; stack trace: ***
ERROR 2024-01-01 00:00:05,000 launch_utils.py:604] ABORT!!! Out of all 8 trainers, the trainer process with rank=[3, 5] was aborted. Please check its log.
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == [3, 5]


def test_every_paddle_trainer_aborting_names_no_rank() -> None:
    d = diag("""
KeyError: 'image'
ERROR 2024-01-01 00:00:05,000 launch_utils.py:604] ABORT!!! Out of all 2 trainers, the trainer process with rank=[0, 1] was aborted. Please check its log.
""")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == []


@pytest.mark.parametrize(
    "line",
    [
        "tensorflow.python.framework.errors_impl.UnknownError:  Failed to get convolution"
        " algorithm. This is probably because cuDNN failed to initialize, so try looking to see"
        " if a warning log message was printed above. [Op:Conv2D]",
        "2021-05-01 10:00:00.000000: E tensorflow/stream_executor/cuda/cuda_dnn.cc:336] Loaded"
        " runtime CuDNN library: 8.0.5 but source was compiled with: 8.1.0.",
        "jax.errors.JaxRuntimeError: INTERNAL: the library was not initialized",
        "E0302 11:00:00.000000 9 pjrt_stream_executor_client.cc:2985] Execution of replica 1"
        " failed: INVALID_ARGUMENT: Argument does not match host shape or layout",
    ],
)
def test_a_gpu_library_or_argument_the_job_set_up_wrong_is_an_app_error(line: str) -> None:
    assert diag(line).fault_class is FaultClass.APP_ERROR


def test_an_oom_printed_with_a_cudnn_init_failure_is_the_oom() -> None:
    d = diag("""
2021-05-01 10:00:00.000000: W tensorflow/core/common_runtime/bfc_allocator.cc:275] Ran out of memory trying to allocate 1.02GiB.  See logs for memory state.
tensorflow.python.framework.errors_impl.UnknownError: Failed to get convolution algorithm. This is probably because cuDNN failed to initialize
""")
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM


def test_nccl_looking_for_an_optional_network_plugin_decides_nothing() -> None:
    d = diag(
        "gpu-1:3183:3183 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 :"
        " libnccl-net.so: cannot open shared object file: No such file or directory"
    )
    assert d.fault_class is FaultClass.UNKNOWN


def test_paddles_newer_launcher_names_the_container_that_failed() -> None:
    d = diag("""
KeyError: 'im_shape'
LAUNCH INFO 2022-11-21 02:35:54,384 Pod failed
LAUNCH ERROR 2022-11-21 02:35:54,385 Container failed !!!
Container rank 2 status failed cmd ['/usr/bin/python3', '-u', 'tools/train.py', '--eval'] code 1 log log/workerlog.2
""")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == [2]


def test_a_rank_prefixed_segfault_banner_is_a_crash_of_that_rank() -> None:
    d = diag("""
12: step 400 loss 1.93
41: !!!!!!! Segfault encountered !!!!!!!
41:   File "<unknown>", line 0, in ncclNetPluginInit
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == [41]


# -- the generalisation round: each mechanism in the words of the stacks that share it ---------


def test_rays_host_oom_wrapped_in_a_task_error_is_the_host_not_the_gpu() -> None:
    d = diag("""
ray.exceptions.RayTaskError(OutOfMemoryError): ray::TrainTrainable.train() (pid=881, ip=10.0.3.14, actor_id=ab12)
""")
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM, d.summary


@pytest.mark.parametrize(
    "text",
    [
        # CANN's AI Core and vector-core exceptions, under torch_npu and MindSpore
        "rtStreamSynchronize execute failed, reason=[aicore exception]"
        "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:53]",
        "[rank4]: EZ9999: [PID: 81] 2025-01-01-10:00:00.000.000 The error from device(chipId:4,"
        " dieId:0), serial number is 9, there is an aivec error exception, core id is 12",
        # ROCm's HSA runtime aborting a faulted queue
        ":0:rocdevice.cpp            :2881: 0132567183 us: [pid:90  tid:0x7f] Callback: Queue"
        " 0x7f00 aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent"
        " attempted to access memory beyond the largest legal address. code: 0x29",
    ],
)
def test_an_accelerator_kernel_fault_outside_cuda_is_a_cuda_error(text: str) -> None:
    d = diag(text)
    assert d.fault_class is FaultClass.CUDA_ERROR, d.summary
    assert d.culprit_hosts == []  # an Ascend error code ("EZ9999: ") names no host


def test_an_ai_cpu_operator_that_only_timed_out_is_no_device_fault() -> None:
    d = diag(
        "rtStreamSynchronizeWithTimeout execute failed, reason=[aicpu timeout]"
        "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:49]"
    )
    assert d.fault_class is not FaultClass.CUDA_ERROR


def test_a_kernel_missing_for_an_amd_gpu_is_the_jobs_build() -> None:
    d = diag("node7:31:31 [0] NCCL WARN Cuda failure 'hipErrorNoBinaryForGpu'")
    assert d.fault_class is FaultClass.APP_ERROR, d.summary


@pytest.mark.parametrize(
    "text",
    [
        # HCCL's notify wait (EI0002) and link set-up (EI0006) timeouts
        "EI0002: 2025-02-01-08:00:00.000.000 The wait execution of the Notify register times out."
        " Reason: The Notify register has not received the Notify record from remote rank [6].",
        "[ERROR] HCCL(4242,python):2025-02-01-08:00:00.000.000 [hccl_socket_manager.cc:816]"
        " [4300][Wait][LinkEstablish]wait socket establish timeout, role[0] rank[0] timeout[120 s]",
        # TensorFlow's collective ops losing a peer task over gRPC
        "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed\n"
        "Additional GRPC error information from remote target /job:worker/replica:0/task:3:",
        # JAX's distributed service giving up on a task that stopped sending heartbeats
        "F0101 00:00:00.000000 1234 client.cc:81] Terminating process because the JAX distributed"
        " service detected fatal errors. This most likely indicates that another task died",
        # CANN: the device's work never finished (a stream or task timeout)
        "[rank3]: RuntimeError: npuSynchronizeDevice:torch_npu/csrc/core/npu/NPUStream.cpp:435 NPU"
        " function error: aclrtSynchronizeDevice, error code is 107020",
        "EE1002: 2025-01-01-00:00:00.000.000 Stream synchronize timeout. rtDeviceSynchronize"
        " execute failed, reason=[stream sync timeout]",
        # a c10d store client that never reached the store (under Ray's prefix)
        "(RayTrainWorker pid=77, ip=10.0.0.8) [E101 00:00:00.000000000 socket.cpp:1011] [c10d] The"
        " client socket has timed out after 600000ms while trying to connect to (10.0.0.2, 29500).",
        # the same store client where the release prints the timeout in seconds, bare or raised
        # as DistNetworkError (a rendezvous that timed out, not a broken link)
        "[E ../torch/csrc/distributed/c10d/socket.cpp:922] [c10d] The client socket has timed out"
        " after 1800s while trying to connect to (trn-04.cluster, 29400).",
        "[rank7]: torch.distributed.DistNetworkError: The client socket has timed out after 300s"
        " while trying to connect to (172.16.0.11, 23456).",
        # a task's own coordination agent gone into error (XLA's distributed client)
        "E0707 08:08:08.080808 31337 client.cc:96] Coordination service agent in error status:"
        " UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task died or"
        " the network is down.",
        "2025-02-02 02:02:02.000002: E external/xla/xla/pjrt/distributed/client.cc:58]"
        " Coordination service agent in error status: ABORTED: Shutdown barrier has failed.",
        # gloo's key-value store giving up on keys other ranks never wrote, then the abort of the
        # uncaught exception (the timeout, not a crash): PyTorch's bundled gloo under mpirun tags
        # and Horovod's HTTP store under its gloo launcher's tags
        "[1,5]<stderr>:terminate called after throwing an instance of 'gloo::IoException'\n"
        "[1,5]<stderr>:  what():  [../third_party/gloo/gloo/rendezvous/file_store.cc:130] Wait"
        " timeout for key(s): [rank_7]\n"
        "[1,5]<stderr>:*** Received signal 6 ***",
        "[3]<stderr>:terminate called after throwing an instance of 'gloo::IoException'\n"
        "[3]<stderr>:  what():  [/tmp/pip-req/horovod/common/gloo/http_store.cc:57] Wait timeout"
        " after 240 seconds for key(s): 12. You may want to increase the timeout via"
        " HOROVOD_GLOO_TIMEOUT_SECONDS\n"
        "[3]<stderr>:Aborted (core dumped)",
        # TensorFlow's gRPC master client that cannot reach the TPU worker it drives
        "2021-04-16 06:05:53.861300: W   41468 tensorflow/core/distributed_runtime/rpc/"
        'grpc_remote_master.cc:159] RPC failed with status = "Unavailable: Socket closed" and'
        ' grpc_error_string = "{}", maybe retrying the RPC',
    ],
)
def test_a_peer_that_stopped_answering_is_a_collective_symptom(text: str) -> None:
    d = diag(text)
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT, d.summary
    assert d.action is not RecoveryAction.DRAIN_AND_RESTART


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        # a TensorFlow parameter server's RecvTensor finding the worker's devices renewed
        (
            "INFO:tensorflow:An error was raised. This may be due to a preemption in a connected"
            " worker or parameter server. Error: From /job:ps/replica:0/task:0:\n"
            "RecvTensor expects a different device incarnation: 8812 vs. 9912. Your worker job"
            ' ("/job:worker/replica:0/task:2") was probably restarted. Check your worker job for'
            " the reason why it was restarted.",
            [],
        ),
        # MultiWorkerMirroredStrategy's collective group: a member came back with new devices
        (
            "tensorflow.python.framework.errors_impl.FailedPreconditionError: Device"
            " /job:worker/replica:0/task:3/device:GPU:0 current incarnation doesn't match with one"
            " in the group. This usually means this worker has restarted but the collective leader"
            " hasn't, or this worker connects to a wrong cluster.",
            [],
        ),
        # TF eager's remote context gone from the worker that was holding it
        (
            "tensorflow.python.framework.errors_impl.AbortedError: Unable to find a context_id"
            " matching the specified one (9123374478219). Perhaps the worker was restarted, or the"
            " context was GC'd?",
            [],
        ),
        # the gRPC master that lost the session the client still uses
        (
            "tensorflow.python.framework.errors_impl.AbortedError: Session 4c1f2e3a is not found."
            " Possibly, this master has restarted.",
            [],
        ),
        # Ray's GCS destroying the actors owned by workers on a node that died
        (
            "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this"
            " task.\n"
            "The actor is dead because its owner has died. Owner Id: 03000000ffffffff Owner Ip"
            " address: 10.4.0.21 Owner worker exit type: SYSTEM_ERROR Worker exit detail: Owner's"
            " node has crashed.",
            ["10.4.0.21"],
        ),
    ],
)
def test_a_peer_task_that_restarted_or_a_node_its_manager_lost_is_a_lost_node(
    text: str, hosts: list[str]
) -> None:
    d = diag(text)
    assert d.fault_class is FaultClass.NODE_LOST, d.summary
    assert d.culprit_hosts == hosts


def test_a_ray_owner_that_exited_on_purpose_is_no_lost_node() -> None:
    d = diag(
        "The actor is dead because its owner has died. Owner Id: 03000000ffffffff Owner Ip"
        " address: 10.4.0.21 Owner worker exit type: INTENDED_USER_EXIT Worker exit detail:"
        " Owner's worker process has exited."
    )
    assert d.fault_class is not FaultClass.NODE_LOST, d.summary


def test_an_hccl_call_failing_on_a_timeout_is_no_application_error() -> None:
    d = diag("""
[rank2]: RuntimeError: InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 OPS function error: HcclAllGather, error code is 6
[rank2]: [ERROR] 2025-05-01-10:00:00 (PID:77, Device:2, RankID:2) ERR01100 OPS call acl api failed.
[rank2]: EI0002: [PID: 77] 2025-05-01-10:00:00.000.000 The wait execution of the Notify register times out.
""")
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT, d.summary


@pytest.mark.parametrize(
    "symptom",
    [
        # the survivor cannot reach the peer any more
        "[worker 0] tensorflow.python.framework.errors_impl.UnavailableError: failed to connect to"
        " all addresses",
        # the peer came back with new devices (its restart after the OOM)
        "[ps 0] RecvTensor expects a different device incarnation: 8812 vs. 9912. Your worker job"
        ' ("/job:worker/replica:0/task:1") was probably restarted.',
    ],
)
def test_a_root_cause_beats_the_symptom_the_peer_it_killed_leaves(symptom: str) -> None:
    d = diag(
        "[worker 1] tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when"
        " allocating tensor with shape[512,4096] and type float on"
        " /job:worker/replica:0/task:1/device:GPU:0 by allocator GPU_0_bfc\n" + symptom
    )
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM, d.summary


def test_an_hccl_roce_error_cqe_is_a_link_failure() -> None:
    d = diag(
        "[PID: 90] 2025-12-04-21:59:08.232.310 Execution Error ROCE CQE(EI0013): An error CQE"
        " occurred during operator execution. Local information: server 10.1.0.1, device ID 0."
        " Peer information: server 10.1.0.2, device ID 1."
    )
    assert d.fault_class is FaultClass.NETWORK_FABRIC, d.summary


def test_cann_names_the_rank_in_its_error_header() -> None:
    d = diag(
        "[ERROR] 2025-03-01-09:00:00 (PID:5150, Device:6, RankID:14) ERR00100 PTA call acl api"
        " failed\nrtStreamSynchronize execute failed, reason=[aicore exception]"
    )
    assert d.fault_class is FaultClass.CUDA_ERROR
    assert d.culprit_ranks == [14]


@pytest.mark.parametrize(
    ("text", "rank"),
    [
        ("[1,5]<stderr>:MPI_ABORT was invoked on rank 5 in communicator MPI_COMM_WORLD", 5),
        (
            "[2025-01-01 00:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3',"
            " '-u', 'train.py', '--local_rank=3', '--deepspeed'] exits with return code = -6",
            3,
        ),
    ],
)
def test_a_rank_that_aborted_with_nothing_better_is_a_weak_crash_of_that_rank(
    text: str, rank: int
) -> None:
    d = diag(text)
    assert d.fault_class is FaultClass.PROCESS_CRASH, d.summary
    assert d.culprit_ranks == [rank]


def test_an_abort_after_a_rank_raised_is_the_exception() -> None:
    d = diag("""
[1,2]<stderr>:ValueError: Expected input batch_size (32) to match target batch_size (16).
[1,2]<stderr>:MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD
""")
    assert d.fault_class is FaultClass.APP_ERROR, d.summary
    assert d.culprit_ranks == [2]


def test_a_dataloader_worker_segfault_under_ray_train_is_a_crash() -> None:
    d = diag(
        "(RayTrainWorker pid=812, ip=10.0.0.4) ERROR: Unexpected segmentation fault encountered in worker."
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH, d.summary
    assert d.culprit_hosts == ["10.0.0.4"]


def test_a_failed_check_glued_to_a_progress_bar_is_still_an_abort() -> None:
    d = diag(
        "Training:   3%|3         | 3/100 [00:04<01:12,  1.2it/s]F1203 10:00:00.123456   991"
        " hlo_instruction.cc:2210] Check failed: operand_count() == 2"
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH, d.summary


def test_paddles_container_killed_by_a_fault_signal_is_a_crash_of_that_rank() -> None:
    d = diag("""
LAUNCH ERROR 2024-02-01 10:00:00,000 Container failed !!!
Container rank 3 status failed cmd ['/usr/bin/python', '-u', 'train.py', '--fleet'] code -11 log log/workerlog.3
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH, d.summary
    assert d.culprit_ranks == [3]


@pytest.mark.parametrize(
    "line",
    [
        # RCCL keeps NCCL's words for a HIP call that failed underneath it
        "gpu-n3:881:902 [1] /opt/rocm/rccl/src/transport/p2p.cc:311 NCCL WARN Cuda failure"
        " 'hipErrorInvalidValue'",
        # a TPU core that halted, in PJRT's and in the TPU driver's words
        "E0301 10:00:00.000000  77 real_program_continuator.cc:1200] 0x0x1_TC0: *** Halt is"
        " unexpected, all pending programs will fail.",
        "RuntimeError: INTERNAL: Core halted unexpectedly: INTERNAL: Accelerator device halted"
        " prematurely, perhaps due to an on-device check-failure. Node 3 halted unexpectedly",
        # DeepSpeed's fused kernels' GEMM failing to execute
        "!!!! kernel execution error. (m: 4096, n: 2048, k: 1024, error: 13)",
        # a failed glog check of a cuDNN or cuBLAS status by number (4 and 14: INTERNAL_ERROR)
        "F0101 00:00:00.000000 812 cuda_dnn.cc:534] Check failed: status =="
        " CUDNN_STATUS_SUCCESS (4 vs. 0)Failed to set cuDNN stream.",
        "F1203 11:22:33.444444 99 gemm.cc:77] Check failed: CUBLAS_STATUS_SUCCESS == ret"
        " (0 vs. 14)",
    ],
)
def test_an_accelerator_runtime_fault_in_other_stacks_words_is_a_cuda_error(line: str) -> None:
    d = diag(line)
    assert d.fault_class is FaultClass.CUDA_ERROR, d.summary


def test_jaxs_nan_check_stopping_a_step_is_the_jobs_numerics() -> None:
    d = diag("FloatingPointError: invalid value (inf) encountered in pjit(update_fn)")
    assert d.fault_class is FaultClass.APP_ERROR, d.summary


def test_a_shell_reporting_a_rank_aborted_without_a_core_is_a_weak_crash_of_it() -> None:
    d = diag(
        "Tue Mar  5 10:00:00 2024[2]<stderr>:bash: line 1: 77123 Aborted                 "
        "HOROVOD_RANK=2 HOROVOD_SIZE=4 python train.py"
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH, d.summary
    assert d.culprit_ranks == [2]


def test_a_hip_runtime_call_failing_with_an_hsa_error_is_a_cuda_error() -> None:
    d = diag(
        'RuntimeError: Failed in file /opt/rocm/hip/src/hip_memory.cpp, in function "h2d_copy",'
        " on line 240, with error: HSA_STATUS_ERROR: A generic error has occurred."
    )
    assert d.fault_class is FaultClass.CUDA_ERROR, d.summary


# -- families the second fresh round (validation-frameworks-12) showed -------------------------


@pytest.mark.parametrize(
    "text",
    [
        # the driver's own status for a GPU gone from PCIe, in a syslog-prefixed kernel log
        "Mar  3 04:11:09 gpu-node-7 kernel: NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost"
        " from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F) returned from"
        " kgspRcAndNotifyAllChannels_IMPL",
        "Mar  3 04:11:09 gpu-node-7 kernel: NVRM: _issueRpcAndWait: rpcSendMessage failed with"
        " status 0x0000000f for fn 76!\n"
        "Mar  3 04:11:09 gpu-node-7 kernel: NVRM: nvAssertOkFailedNoLog: Assertion failed: GPU"
        " lost from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F) returned from rmStatus @"
        " kernel_ce_gv100.c:106",
    ],
)
def test_a_gpu_the_driver_reports_lost_from_the_bus_is_hardware_on_that_host(text: str) -> None:
    d = diag(text)
    assert d.fault_class is FaultClass.GPU_HARDWARE, d.summary
    assert d.culprit_hosts == ["gpu-node-7"]


@pytest.mark.parametrize(
    "line",
    [
        "E0412 09:00:00.000000 1234 pjrt_stream_executor_client.cc:2716] Execution of replica 0"
        " failed: INTERNAL: stream did not block host until done; was already in an error state",
        "tensorflow.python.framework.errors_impl.InternalError: Failed to complete all kernels"
        " launched on stream 0x7f3a2c0b1e00: stream did not block host until done; was already in"
        " an error state",
    ],
)
def test_a_gpu_stream_already_in_an_error_state_is_a_device_runtime_error(line: str) -> None:
    d = diag(line)
    assert d.fault_class is FaultClass.CUDA_ERROR, d.summary


def test_the_failure_that_put_a_stream_in_its_error_state_decides() -> None:
    d = diag("""
2024-01-01 00:00:00.000001: E external/xla/xla/stream_executor/cuda/cuda_driver.cc:1300] failed to allocate 14.00GiB (15032385536 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory
jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to complete all kernels launched on stream 0x55e0c0de0000: stream did not block host until done; was already in an error state
""")
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM, d.summary


def test_an_nccl_connect_to_an_ipv6_link_local_peer_that_aborts_is_the_fabric() -> None:
    d = diag(
        "dgx-a-03:5512:5590 [2] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to"
        " fe80::1e34:da03:5c:7f10%ib3<40011> failed : Software caused connection abort"
    )
    assert d.fault_class is FaultClass.NETWORK_FABRIC, d.summary


@pytest.mark.parametrize(
    "text",
    [
        "h100-2:771:802 [4] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to"
        " 127.0.0.1<51023> failed : Software caused connection abort\n"
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled"
        " system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "[rank3]: ncclSystemError: System call (e.g. socket, malloc) or external library call"
        " failed or device error.\n[rank3]: Last error:\n[rank3]: socketStartConnect: Connect to"
        " ::1<36612> failed : Connection refused",
    ],
)
def test_an_nccl_connect_to_a_loopback_address_is_the_jobs_setup_never_the_fabric(
    text: str,
) -> None:
    d = diag(text)
    assert d.fault_class is FaultClass.APP_ERROR, d.summary
    assert d.action is not RecoveryAction.DRAIN_AND_RESTART


def test_a_crash_beside_a_loopback_connect_failure_is_the_crash() -> None:
    d = diag("""
[rank1]: Fatal Python error: Segmentation fault
h100-2:771:802 [4] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to 127.0.0.1<51023> failed : Connection refused
""")
    assert d.fault_class is FaultClass.PROCESS_CRASH, d.summary


def test_an_nccl_internal_error_alone_is_no_network_failure() -> None:
    d = diag(
        "RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:275,"
        " internal error - please report this issue to the NCCL developers, NCCL version 2.23.4"
    )
    assert d.fault_class is not FaultClass.NETWORK_FABRIC, d.summary
    assert d.culprit_hosts == []


def test_an_nccl_internal_error_after_an_ib_completion_error_is_the_fabric() -> None:
    d = diag("""
gpu-3:881:902 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.8<51234> with error 12, opcode 0, len 0, vendor err 129 (Recv)
RuntimeError: NCCL error in: NCCLUtils.hpp:275, internal error - please report this issue to the NCCL developers, NCCL version 2.18.1
""")
    assert d.fault_class is FaultClass.NETWORK_FABRIC, d.summary


def test_torchruns_role_prefix_is_a_local_rank_the_global_rank_beside_it_wins() -> None:
    d = diag(
        "[default3]:[rank27]:[E1102 10:00:00.000000000 ProcessGroupNCCL.cpp:1515] [PG 0"
        " (default_pg) Rank 27] Process group watchdog thread terminated with exception: CUDA"
        " error: uncorrectable ECC error encountered"
    )
    assert d.fault_class is FaultClass.GPU_HARDWARE, d.summary
    assert d.culprit_ranks == [27]


def test_torchruns_role_prefix_alone_still_names_its_rank() -> None:
    d = diag("[default2]:RuntimeError: CUDA error: uncorrectable ECC error encountered")
    assert d.culprit_ranks == [2]


def test_an_nccl_line_names_the_rank_its_process_initialised_as() -> None:
    d = diag("""
nodeB:3301:3390 [1] NCCL INFO comm 0x7f00aa000000 rank 5 nranks 8 cudaDev 1 busId 1c000 - Init COMPLETE
nodeA:2201:2290 [1] NCCL INFO comm 0x7f00bb000000 rank 1 nranks 8 cudaDev 1 busId 1c000 - Init COMPLETE
nodeB:3301:3412 [1] misc/ibvwrap.cc:230 NCCL WARN Call to ibv_create_qp failed
""")
    assert d.fault_class is FaultClass.NETWORK_FABRIC, d.summary
    assert d.culprit_hosts == ["nodeB"]
    assert d.culprit_ranks == [5]


# -- validation-frameworks-13's families ---------------------------------------------------


def test_the_failure_behind_a_coordination_agent_in_error_decides() -> None:
    d = diag("""
jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes.
E0707 08:08:09.000000 31337 client.cc:96] Coordination service agent in error status: CANCELLED: Task was cancelled
""")
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM, d.summary


def test_a_failed_check_of_a_cudnn_status_that_is_alloc_failed_is_a_weak_device_oom() -> None:
    d = diag(
        "F tensorflow/stream_executor/cuda/cuda_dnn.cc:194] Check failed: status =="
        " CUDNN_STATUS_SUCCESS (2 vs. 0)Failed to set cuDNN stream."
    )
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM, d.summary
    assert d.action is RecoveryAction.RESTART  # a number alone is too weak to stop the job


def test_a_failed_check_of_a_cudnn_status_that_is_a_bad_parameter_is_no_device_fault() -> None:
    d = diag(
        "F cuda_dnn.cc:2101] Check failed: status == CUDNN_STATUS_SUCCESS (3 vs. 0)"
        "Failed to set cuDNN stream."
    )
    assert d.fault_class not in {FaultClass.CUDA_ERROR, FaultClass.MEMORY_DEVICE_OOM}, d.summary


HOROVOD_STALL_WARNING = (
    "WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset"
    " of ranks and are waiting for remainder of ranks for more than 60 seconds. Stalled ops: "
)


@pytest.mark.parametrize(
    ("stalled_ops", "ranks"),
    [
        # one rank left the others' sequence: it is missing from most of the stalled tensors
        (
            "HorovodAllreduce_loss_0 [ready ranks: 0, 1, 3], HorovodAllreduce_w1_0 [ready ranks:"
            " 1, 3, 0], HorovodAllreduce_w2_0 [ready ranks: 2], HorovodAllreduce_w3_0 [ready"
            " ranks: 3, 1, 0]",
            [2],
        ),
        # every tensor waits on the same rank, below the highest ready one
        (
            "allreduce.fc.weight [ready ranks: 3, 1, 2], allreduce.fc.bias [ready ranks: 1, 2, 3]",
            [0],
        ),
    ],
)
def test_horovods_one_line_stall_report_names_the_ranks_missing_from_most_tensors(
    stalled_ops: str, ranks: list[int]
) -> None:
    d = diag(HOROVOD_STALL_WARNING + stalled_ops)
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT, d.summary
    assert d.culprit_ranks == ranks


# -- a file-system refusal the job outlived ------------------------------------------------


@pytest.mark.parametrize(
    ("log", "expected", "outlived"),
    [
        (  # a container's start-up shell step, then a watchdog timeout in training
            "mkdir: cannot create directory '/workspace/.triton': Read-only file system\n"
            "[rank3]:[E1010 11:50:05.315197062 ProcessGroupNCCL.cpp:565] [Rank 3] Watchdog"
            " caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE,"
            " NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before"
            " timing out.",
            FaultClass.COLLECTIVE_TIMEOUT,
            True,
        ),
        (  # an entrypoint script's line, then a device fault
            "/entrypoint.sh: line 7: /etc/ld.so.conf.d/cuda.conf: Read-only file system\n"
            "epoch 1 step 10 loss 2.3\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            FaultClass.CUDA_ERROR,
            True,
        ),
        (  # a Python warning about a cache directory, then a segfault
            "/opt/conda/lib/python3.10/site-packages/torch/hub.py:600: UserWarning: could not"
            " create cache dir /root/.cache/torch: [Errno 30] Read-only file system\n"
            "step 100 loss 1.2\n"
            "Fatal Python error: Segmentation fault",
            FaultClass.PROCESS_CRASH,
            True,
        ),
        (  # a staging copy that ran out of room, then the device OOM that stopped the job
            "cp: error writing '/scratch/shard-0001.bin': No space left on device\n"
            "step 5 loss 3.1\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            FaultClass.MEMORY_DEVICE_OOM,
            True,
        ),
        (  # the job's own save refused, the other ranks' timeouts after it: root and cascade
            "[rank0]: OSError: [Errno 30] Read-only file system: '/ckpt/step_1000/model.pt'\n"
            "[rank1]:[E1010 12:20:05.315197062 ProcessGroupNCCL.cpp:565] [Rank 1] Watchdog caught"
            " collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1,"
            " NumelOut=1, Timeout(ms)=1800000) ran for 1800012 milliseconds before timing out.",
            FaultClass.STORAGE_ERROR,
            False,
        ),
        (  # TensorFlow logs a failed save at glog's W level: no warning the job outlived
            "2023-01-01 10:00:00.000000: W tensorflow/core/framework/op_kernel.cc:1830]"
            " OP_REQUIRES failed at save_restore_v2_ops.cc:160 : RESOURCE_EXHAUSTED:"
            " /ckpt/model.ckpt-100_temp/part-00000-of-00001.data-00000-of-00001; No space left"
            " on device\n"
            "[rank1]:[E1010 12:20:05.315197062 ProcessGroupNCCL.cpp:565] [Rank 1] Watchdog caught"
            " collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1,"
            " NumelOut=1, Timeout(ms)=1800000) ran for 1800012 milliseconds before timing out.",
            FaultClass.STORAGE_ERROR,
            False,
        ),
        (  # a shell step's refusal with nothing after it ended the job
            "rm: cannot remove '/ckpt/old': Read-only file system",
            FaultClass.STORAGE_ERROR,
            False,
        ),
        (  # a shell step's refusal, then the job's own storage failure: one storage fault
            "mkdir: cannot create directory '/ckpt/step_9': Read-only file system\n"
            "OSError: [Errno 30] Read-only file system: '/ckpt/step_9/model.pt'",
            FaultClass.STORAGE_ERROR,
            False,
        ),
    ],
)
def test_a_set_up_refusal_roots_only_a_storage_failure_the_job_did_not_outlive(
    log: str, expected: FaultClass, outlived: bool
) -> None:
    d = diag(log)
    assert d.fault_class is expected
    assert ("outlived a set-up refusal" in d.summary) is outlived


# -- Ray's reports of a worker process that died -------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "The actor is dead because its worker process has died.",
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR"
        " Worker exit detail: Worker exits unexpectedly. Worker exits with an exit code None.",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "(raylet) A worker died or was killed while executing a task by an unexpected system"
        " error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID:"
        " ffffffffffffffff Worker ID: 5e1c Node ID: 0a9d Worker IP address: 10.0.0.4",
        "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this"
        " task. Check python-core-worker-*.log files for more information.",
    ],
)
def test_rays_report_of_a_worker_that_died_is_a_crash(line: str) -> None:
    d = diag(line)
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert not d.culprit_hosts  # a weak reading names nothing to drain


def test_a_ray_worker_that_exited_on_purpose_is_no_crash() -> None:
    d = diag(
        "The actor is dead because its worker process has died. Worker exit type:"
        " INTENDED_USER_EXIT Worker exit detail: Worker exits by a user request. exit_actor()"
        " is called."
    )
    assert d.fault_class is not FaultClass.PROCESS_CRASH


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        (
            "(RayTrainWorker pid=412, ip=10.0.0.7) RuntimeError: CUDA error: an illegal memory"
            " access was encountered",
            FaultClass.CUDA_ERROR,
        ),
        (
            "Memory on the node (IP: 10.0.0.7, ID: 3f2a) where the actor (actor ID: 0a1b,"
            " name=RayTrainWorker.__init__, pid=912) was running was 61.2GB / 64.0GB (0.956;"
            " threshold 0.95). Ray killed this worker",
            FaultClass.MEMORY_HOST_OOM,
        ),
    ],
)
def test_the_cause_a_ray_log_shows_beats_the_workers_death(
    cause: str, expected: FaultClass
) -> None:
    d = diag(
        f"{cause}\nray.exceptions.ActorDiedError: The actor died unexpectedly before finishing"
        " this task.\nThe actor is dead because its worker process has died."
    )
    assert d.fault_class is expected


# -- a runtime session or task lost under the job, in other clients' words ----------------


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (  # XRT's client (PyTorch/XLA on a TPU host): the master's RunStep lost the session
            "Exception in device=TPU:2: Aborted: Session 3d9e0c17a2b45f88 is not found.\n"
            "terminate called after throwing an instance of 'std::runtime_error'\n"
            "  what():  tensorflow/compiler/xla/xla_client/xrt_computation_client.cc:1110 : Check"
            " failed: session->session()->Run( feed_inputs, {}, {cached_node.operations[0]},"
            " &outputs ) == ::tensorflow::Status::OK() (Aborted: Session 3d9e0c17a2b45f88 is not"
            " found. vs. OK)",
            FaultClass.NODE_LOST,
        ),
        (  # the coordination service (XLA/PJRT) sees a task come back under a new incarnation
            "jaxlib.xla_extension.XlaRuntimeError: ABORTED: /job:jax_worker/replica:0/task:6"
            " unexpectedly tried to connect with a different incarnation. It has likely"
            " restarted.\n"
            "F0101 00:00:00.000000 1234 client.cc:81] Terminating process because the JAX"
            " distributed service detected fatal errors.",
            FaultClass.NODE_LOST,
        ),
        (  # the cause the log shows for the lost session decides
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB\n"
            "Exception in device=TPU:0: Aborted: Session 3d9e0c17a2b45f88 is not found.",
            FaultClass.MEMORY_DEVICE_OOM,
        ),
        (  # a session handle missing from a cache is the program's, no lost node
            "tensorflow.python.framework.errors_impl.InvalidArgumentError: Session handle is"
            " not found in the cache",
            FaultClass.APP_ERROR,
        ),
    ],
)
def test_a_session_or_task_lost_under_the_job_is_a_node_that_went_away(
    log: str, expected: FaultClass
) -> None:
    assert diag(log).fault_class is expected


# -- which rank a collective timeout blames ------------------------------------------------


@pytest.mark.parametrize(
    ("log", "ranks"),
    [
        (  # one rank's watchdog: that rank waited on the others
            "[rank5]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 5] Watchdog caught"
            " collective operation timeout: WorkNCCL(SeqNum=77, OpType=ALLGATHER, NumelIn=8,"
            " NumelOut=64, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.",
            [],
        ),
        (  # the same, inside the what() of the DistBackendError that aborts the process
            "terminate called after throwing an instance of 'c10::DistBackendError'\n"
            "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 6] Process group watchdog thread"
            " terminated with exception: [Rank 6] Watchdog caught collective operation timeout:"
            " WorkNCCL(SeqNum=9, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran"
            " for 1800083 milliseconds before timing out.",
            [],
        ),
        (  # a heartbeat monitor finding its own watchdog stuck
            "[rank12]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 12] Heartbeat monitor timed out!"
            " Process will be terminated after dumping debug info.",
            [],
        ),
        (  # the service compared its tasks and names the one it stopped hearing
            "E0101 00:10:00.000000 77 coordination_service.cc:1170]"
            " /job:jax_worker/replica:0/task:5 has been set to ERROR in coordination service:"
            " UNAVAILABLE: Task /job:jax_worker/replica:0/task:5 heartbeat timeout. This"
            " indicates that the remote task has failed, got preempted, or crashed unexpectedly.",
            [5],
        ),
        (  # a one-process job's task 0: no other task to single it out from
            "UNAVAILABLE: Task /job:jax_worker/replica:0/task:0 heartbeat timeout. This indicates"
            " that the remote task has failed, got preempted, or crashed unexpectedly.",
            [],
        ),
    ],
)
def test_a_collective_timeout_blames_only_a_rank_that_comparing_ranks_singles_out(
    log: str, ranks: list[int]
) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == ranks


def test_a_rank_behind_in_its_group_is_blamed_where_a_later_line_omits_the_group() -> None:
    # PyTorch 2.5 follows the watchdog's progress report with "Timeout at NCCL work" under the
    # same [PG ...] prefix; a paste (or a release) may drop it. Both lines are about the same
    # work of the same group, so rank 0 (last completed 41) is behind rank 1 (45).
    log = """
[rank0]:[E0301 10:00:00.1 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 0] Exception (either an error or timeout) detected by watchdog at work: 42, last enqueued NCCL work: 44, last completed NCCL work: 41.
[rank1]:[E0301 10:00:01.1 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 46, last enqueued NCCL work: 47, last completed NCCL work: 45.
[rank1]:[E0301 10:00:02.1 ProcessGroupNCCL.cpp:1834] Rank 1] Timeout at NCCL work: 46, last enqueued NCCL work: 47, last completed NCCL work: 45.
"""
    d = diag(log)
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == [0]


def test_ranks_of_different_groups_are_still_not_compared() -> None:
    log = """
[rank0]:[E0301 10:00:00.1 ProcessGroupNCCL.cpp:1785] [PG ID 1 PG GUID 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 12, last enqueued NCCL work: 12, last completed NCCL work: 11.
[rank1]:[E0301 10:00:01.1 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 46, last enqueued NCCL work: 47, last completed NCCL work: 45.
[rank1]:[E0301 10:00:02.1 ProcessGroupNCCL.cpp:1834] Rank 1] Timeout at NCCL work: 46, last enqueued NCCL work: 47, last completed NCCL work: 45.
"""
    assert diag(log).culprit_ranks == []


# -- the coordination service's key-value store timing out (XLA, TensorFlow) ---------------


@pytest.mark.parametrize(
    "log",
    [
        # PJRT publishing an NCCL clique id at the first collective; the payload comes last
        "E0301 00:00:00.000000 1 pjrt_stream_executor_client.cc:3072] Execution of replica 1"
        " failed: DEADLINE_EXCEEDED: GetKeyValue() timed out with key: devices=[0,1,2,3,4,5,6,7];"
        " stream=0; groups=[[0,1,2,3,4,5,6,7]]; root_device=0; num_local_participants=4 and"
        " duration: 30m [type.googleapis.com/tensorflow.CoordinationServiceError='']",
        # jax.distributed.initialize exchanging the local topologies
        "jaxlib._jax.XlaRuntimeError: INTERNAL: Getting local topologies failed: Error 1:"
        " GetKeyValue() timed out with key: cuda:local_topology/cuda/3 and duration: 2m",
        # TensorFlow's agent, raised in Python
        "tensorflow.python.framework.errors_impl.DeadlineExceededError: GetKeyValue() timed out"
        " with key: worker_config/2 and duration: 5m",
        # the service's payload on a deadline without the agent's words
        "jax.errors.JaxRuntimeError: DEADLINE_EXCEEDED: Deadline Exceeded"
        " [type.googleapis.com/tensorflow.CoordinationServiceError='']",
    ],
)
def test_a_coordination_key_value_wait_that_ran_out_is_a_collective_timeout(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == []


def test_the_failure_that_kept_a_task_from_publishing_its_key_decides() -> None:
    log = """
E0301 00:00:00.000000 1 pjrt_stream_executor_client.cc:3072] Execution of replica 0 failed: DEADLINE_EXCEEDED: GetKeyValue() timed out with key: devices=[0,1]; stream=0 and duration: 10m
jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.
"""
    assert diag(log).fault_class is FaultClass.MEMORY_DEVICE_OOM


# -- MPI programs that broke the standard ---------------------------------------------------


@pytest.mark.parametrize(
    ("log", "hosts", "ranks"),
    [
        (  # Open MPI: a call before MPI_Init, and the host of the process that aborted
            "*** The MPI_Comm_size() function was called before MPI_INIT was invoked.\n"
            "*** This is disallowed by the MPI standard.\n"
            "*** Your MPI job will now abort.\n"
            "[gpu-node-07:31337] Local abort before MPI_INIT completed completed successfully,"
            " but am not able to aggregate error messages, and not able to guarantee that all"
            " other processes were killed!",
            ["gpu-node-07"],
            [],
        ),
        (  # Open MPI: a destructor calling MPI after MPI_Finalize
            "*** The MPI_Comm_free() function was called after MPI_FINALIZE was invoked.\n"
            "*** This is disallowed by the MPI standard.\n"
            "*** Your MPI job will now abort.\n"
            "[cn042.cluster.local:7781] Local abort after MPI_FINALIZE started completed"
            " successfully, but am not able to aggregate error messages, and not able to"
            " guarantee that all other processes were killed!",
            ["cn042.cluster.local"],
            [],
        ),
        (  # MPICH under mpi4py imported without initialising MPI
            "Attempting to use an MPI routine (internal_Comm_rank) before initializing or after"
            " finalizing MPICH",
            [],
            [],
        ),
        (  # Open MPI's fatal error handler rejecting the program's arguments
            "[worker3:2194] *** An error occurred in MPI_Recv\n"
            "[worker3:2194] *** reported by process [1590624257,1]\n"
            "[worker3:2194] *** on communicator MPI_COMM_WORLD\n"
            "[worker3:2194] *** MPI_ERR_TRUNCATE: message truncated\n"
            "[worker3:2194] *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now"
            " abort,\n"
            "[worker3:2194] ***    and potentially your MPI job)",
            ["worker3"],
            [1],  # the banner's [jobid,vpid]: rank 1 in MPI_COMM_WORLD
        ),
        (  # MPICH naming the rank whose call it rejected
            "Abort(537553414) on node 1 (rank 1 in comm 0): Fatal error in internal_Send:"
            " Invalid rank, error stack:\n"
            "internal_Send(124): MPI_Send(buf=0x7ffd7768d3f4, count=1, MPI_INT, 2, 0,"
            " MPI_COMM_WORLD) failed\n"
            "internal_Send(78).: Invalid rank has value 2 but must be nonnegative and less than 2",
            [],
            [1],
        ),
        (  # mpi4py raising Open MPI's error class
            "Traceback (most recent call last):\n"
            '  File "train.py", line 40, in <module>\n'
            "    comm.Recv(buf, source=0)\n"
            '  File "mpi4py/MPI/Comm.pyx", line 312, in mpi4py.MPI.Comm.Recv\n'
            "mpi4py.MPI.Exception: MPI_ERR_TRUNCATE: message truncated",
            [],
            [],
        ),
    ],
)
def test_an_mpi_program_that_broke_the_standard_is_an_application_error(
    log: str, hosts: list[str], ranks: list[int]
) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_hosts == hosts
    assert d.culprit_ranks == ranks


@pytest.mark.parametrize(
    "log",
    [
        # an MPI library failing in itself, not the program's arguments
        "[n1:77] *** An error occurred in MPI_Allreduce\n[n1:77] *** MPI_ERR_INTERN: internal error",
        "Fatal error in PMPI_Barrier: Other MPI error, error stack:",
        # Open MPI's abort note alone: MPI_Init can fail for the network's reasons too
        "[n1:77] Local abort before MPI_INIT completed completed successfully, but am not able to"
        " aggregate error messages, and not able to guarantee that all other processes were"
        " killed!",
    ],
)
def test_an_mpi_failure_that_is_not_the_programs_use_is_no_application_error(log: str) -> None:
    assert diag(log).fault_class is not FaultClass.APP_ERROR


def test_a_python_exceptions_dotted_name_with_a_digit_is_no_host_prefix() -> None:
    d = diag("mpi4py.MPI.Exception: Invalid communicator, error stack:")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_hosts == []


# -- a device the job's binding does not give it ----------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # torch.cuda.set_device(local_rank) with more ranks per node than visible GPUs
        "[rank5]: Traceback (most recent call last):\n"
        '[rank5]:   File "train.py", line 21, in <module>\n'
        "[rank5]:     torch.cuda.set_device(local_rank)\n"
        "[rank5]: RuntimeError: CUDA error: invalid device ordinal\n"
        "[rank5]: Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        # NCCL under the same mistake
        "gpu-3:1201:1201 [4] NCCL WARN Cuda failure 'invalid device ordinal'",
        # TensorFlow/XLA's StreamExecutor given a device index the process does not have
        "2024-03-01 10:00:00.000000: F external/xla/xla/stream_executor/cuda/cuda_platform.cc:52]"
        " Invalid device ordinal value (2). Valid range is [0, 0].",
        # JAX with one GPU per task bound the wrong way
        "jaxlib.xla_extension.XlaRuntimeError: Unable to initialize backend 'cuda': INTERNAL:"
        " no supported devices found for platform CUDA (you may need to uninstall the failing"
        " plugin package, or set JAX_PLATFORMS=cpu to skip this backend.)",
        "RuntimeError: Unable to initialize backend 'rocm': INTERNAL: no supported devices found"
        " for platform ROCM",
        # no device left to the process at all
        "RuntimeError: No CUDA GPUs are available",
        "RuntimeError: No HIP GPUs are available",
        "RuntimeError: CUDA error: no CUDA-capable device is detected",
        # a checkpoint mapped to a device index the process does not have
        "RuntimeError: Attempting to deserialize object on CUDA device 3 but"
        " torch.cuda.device_count() is 1. Please use torch.load with map_location to map your"
        " storages to an existing device.",
    ],
)
def test_a_device_the_jobs_binding_does_not_give_it_is_the_jobs_configuration(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is not RecoveryAction.DRAIN_AND_RESTART


@pytest.mark.parametrize(
    "log",
    [
        "RuntimeError: No CUDA GPUs are available",
        "RuntimeError: CUDA error: no CUDA-capable device is detected",
        "RuntimeError: Unable to initialize backend 'cuda': INTERNAL: no supported devices found"
        " for platform CUDA",
    ],
)
def test_no_device_at_all_is_too_weak_to_stop_the_job(log: str) -> None:
    # the binding most often, but a node whose GPUs or driver went away reads the same
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.RESTART


def test_a_device_index_the_binding_does_not_have_stops_the_job() -> None:
    d = diag("[rank3]: RuntimeError: CUDA error: invalid device ordinal")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (  # the device left the bus: the hardware, not the binding
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
            "RuntimeError: CUDA error: no CUDA-capable device is detected",
            FaultClass.GPU_HARDWARE,
        ),
        (  # context creation ran out of device memory (another process holds the GPU)
            "E0301 cuda_driver.cc:266] failed call to cuDevicePrimaryCtxRetain:"
            " CUDA_ERROR_OUT_OF_MEMORY: out of memory; total memory reported: 25396838400\n"
            "RuntimeError: Unable to initialize backend 'cuda': INTERNAL: no supported devices"
            " found for platform CUDA",
            FaultClass.MEMORY_DEVICE_OOM,
        ),
    ],
)
def test_a_fault_that_explains_a_missing_device_outranks_the_binding(
    log: str, expected: FaultClass
) -> None:
    assert diag(log).fault_class is expected


def test_tensorflows_start_up_warning_of_no_device_is_no_binding_error() -> None:
    d = diag(
        "E tensorflow/stream_executor/cuda/cuda_driver.cc:271] failed call to cuInit:"
        " CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"
    )
    assert d.fault_class is not FaultClass.APP_ERROR


# -- object-store writes refused, in the clients' other words ---------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # botocore's connection errors re-raised by a wrapper, in their own messages
        '{"simapp_exception": {"function": "save_to_store", "message": "Exception [Connection was'
        ' closed before we received a valid response from endpoint URL: \\"http://minio:9000/b/'
        'ckpt.data?uploadId=1&partNumber=3\\".] occured while uploading files on S3"}}',
        "RuntimeError: checkpoint upload failed: Could not connect to the endpoint URL:"
        ' "https://bucket.s3.eu-west-1.amazonaws.com/run/step_400/optim.pt"',
        'ValueError: Read timeout on endpoint URL: "https://bucket.s3.amazonaws.com/run/model.pt"',
        # the store refusing a request signed with a clock it does not trust, or a conflict
        "botocore.exceptions.ClientError: An error occurred (RequestTimeTooSkewed) when calling"
        " the UploadPart operation: The difference between the request time and the server's"
        " time is too large.",
        "botocore.exceptions.ClientError: An error occurred (OperationAborted) when calling the"
        " PutObject operation: A conflicting conditional operation is currently in progress",
        # TensorFlow's GCS file system, any status on its write paths
        "Permission denied: Error executing an HTTP request: HTTP response code 403 with body"
        " 'rate limited' when initiating an upload to gs://bkt/ckpt/model.ckpt-10.index",
        "\t when uploading gs://bkt/models/model.ckpt-8000_temp_aa3d8a/",
        "Unavailable: Upload to gs://bkt/models/ckpt-9.data-00000-of-00001 failed, caused by: Not"
        " found: Error executing an HTTP request: HTTP response code 410",
    ],
)
def test_an_object_store_refusing_a_write_in_its_clients_words_is_storage(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.STORAGE_ERROR
    assert d.action is not RecoveryAction.DRAIN_AND_RESTART


@pytest.mark.parametrize(
    "log",
    [
        "An error occurred (AccessDenied) when calling the PutObject operation: Access Denied",
        "INFO Upload to gs://bkt/run/ckpt-100.index complete",
        "Could not connect to the database at db:5432",
    ],
)
def test_a_refused_permission_or_a_finished_upload_is_no_storage_failure(log: str) -> None:
    assert diag(log).fault_class is not FaultClass.STORAGE_ERROR


# -- a file operation refused by the file system, in TensorFlow/absl's "PATH; strerror" -------


@pytest.mark.parametrize(
    "log",
    [
        "W tensorflow/core/framework/op_kernel.cc:1622] OP_REQUIRES failed at"
        " save_restore_v2_ops.cc:137 : Invalid argument: /dbfs/mnt/x/ckpt-3_temp/part-00001-of-"
        "00002.data-00000-of-00001.tempstate946; Invalid argument",
        "tensorflow.python.framework.errors_impl.UnknownError: /lustre/run/ckpt-12_temp/part-0;"
        " Input/output error [Op:SaveV2]",
        "tensorflow.python.framework.errors_impl.UnavailableError: /mnt/gcsfuse/ckpt/ckpt-7.index;"
        " Transport endpoint is not connected",
        "E0301 checkpoint.cc:88] Internal: /nfs/home/u/run/events.out.tfevents.1.n3; Stale file"
        " handle",
    ],
)
def test_a_tensorflow_file_operation_the_file_system_refused_is_storage(log: str) -> None:
    assert diag(log).fault_class is FaultClass.STORAGE_ERROR


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (  # a path the job named that is not there: its own configuration
            "tensorflow.python.framework.errors_impl.NotFoundError: /data/train-00001.tfrecord;"
            " No such file or directory",
            FaultClass.APP_ERROR,
        ),
        (  # Python's OSError words it differently, and a bad argument is the program's
            "InvalidArgumentError: Incompatible shapes: [32,10] vs. [64,10]",
            FaultClass.APP_ERROR,
        ),
    ],
)
def test_a_missing_path_or_a_bad_argument_is_the_jobs_own(log: str, expected: FaultClass) -> None:
    assert diag(log).fault_class is expected


# -- ranks that ran different collectives -----------------------------------------------------


@pytest.mark.parametrize(
    ("log", "ranks"),
    [
        (  # PyTorch's checker; the fingerprint's words (memory_format, device) decide nothing
            "[rank2]: RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is"
            " running collective: CollectiveFingerPrint(SequenceNumber=40, OpType=ALLGATHER,"
            " TensorShape=[16], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float"
            " (default), device=cuda, layout=Strided (default), requires_grad=false (default),"
            " pinned_memory=false (default), memory_format=(nullopt))), but Rank 0 is running"
            " collective: CollectiveFingerPrint(SequenceNumber=40, OpType=BROADCAST).",
            [2],
        ),
        (  # DeepSpeed ZeRO-3's parameter trace differing between ranks
            "[rank6]: RuntimeError: disagreement between rank0 and rank6: rank0: [0, 1, 2, 3],"
            " rank6: [0, 1, 3]",
            [6],
        ),
    ],
)
def test_ranks_that_ran_different_collectives_are_a_program_error(
    log: str, ranks: list[int]
) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == ranks


# -- XLA refusing the program: a cut pass context, a broken invariant -------------------------


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: during context [pre-optimization]",
            FaultClass.APP_ERROR,
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: RET_CHECK failure"
            " (external/xla/xla/service/spmd/spmd_partitioner.cc:512) sharding.IsTuple()",
            FaultClass.APP_ERROR,
        ),
        (  # a RET_CHECK on a device stream's state is the device's, not the program's
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: RET_CHECK failure"
            " (xla/stream_executor/cuda/cuda_driver.cc:1210) stream->ok() CUDA_ERROR_ILLEGAL_ADDRESS",
            FaultClass.CUDA_ERROR,
        ),
    ],
)
def test_xla_refusing_the_program_is_an_application_error(log: str, expected: FaultClass) -> None:
    assert diag(log).fault_class is expected


# -- the proactive families pass: each stack's own fatal wordings, read from its source -----


STACK_WORDINGS_BY_CLASS = [
    # TensorFlow: the BFC allocator's failing line (TSL's format) and a device copy it could
    # not allocate
    (
        "W external/local_tsl/tsl/framework/bfc_allocator.cc:485] Allocator (GPU_2_bfc) ran"
        " out of memory trying to allocate 6.50GiB (rounded to 6979321856)requested by op"
        " StatefulPartitionedCall/dense/MatMul",
        FaultClass.MEMORY_DEVICE_OOM,
    ),
    (
        "tensorflow.python.framework.errors_impl.InternalError: Failed copying input tensor from"
        " /job:localhost/replica:0/task:0/device:CPU:0 to /job:localhost/replica:0/task:0/"
        "device:GPU:1 in order to run _EagerConst: Dst tensor is not initialized.",
        FaultClass.MEMORY_DEVICE_OOM,
    ),
    # TensorFlow's event manager aborting on a failed CUDA event
    (
        "2021-03-02 11:12:13.000001: F tensorflow/core/common_runtime/gpu/gpu_event_mgr.cc:273]"
        " Unexpected Event status: 1",
        FaultClass.CUDA_ERROR,
    ),
    # TensorFlow's collectives aborted by a peer's failure, under another status
    (
        "tensorflow.python.framework.errors_impl.DeadlineExceededError: Collective ops is aborted"
        " by: Deadline exceeded [Op:CollectiveReduceV2]",
        FaultClass.COLLECTIVE_TIMEOUT,
    ),
    # TensorFlow's reader finding a checkpoint's checksum broken
    (
        "tensorflow.python.framework.errors_impl.DataLossError: Checksum does not match: stored"
        " 2381523 vs. calculated on the restored bytes 918273",
        FaultClass.STORAGE_ERROR,
    ),
    # Horovod's coordinator refusing requests the ranks disagree on
    (
        "[1]<stderr>:horovod.common.exceptions.HorovodInternalError: Mismatched data types: One"
        " rank had type float32, but another rank had type int64.",
        FaultClass.APP_ERROR,
    ),
    (
        "RuntimeError: Mismatched MPI operations: One rank did an allgather, but another rank"
        " did a broadcast.",
        FaultClass.APP_ERROR,
    ),
    # NCCL: two ranks on one GPU; the socket transport's own progress error
    (
        "gpu7:4410:4500 [1] NCCL WARN Duplicate GPU detected : rank 3 and rank 2 both on CUDA"
        " device 4f000",
        FaultClass.APP_ERROR,
    ),
    (
        "gpu7:4410:4500 [1] NCCL WARN NET/Socket : socket progress error",
        FaultClass.NETWORK_FABRIC,
    ),
    # MPI transports: Open MPI's TCP help text, openib, UCX, MPICH's OFI netmod (whose errno
    # is the provider's, not a file system's)
    (
        "A process or daemon was unable to complete a TCP connection\nto another process:\n"
        "  Local host:    cn12\n  Remote host:   cn14",
        FaultClass.NETWORK_FABRIC,
    ),
    (
        "[cn12][[4242,1],5][btl_openib_component.c:3645:handle_wc] from cn12 to: cn14 error"
        " polling HP CQ with status WORK REQUEST FLUSHED ERROR status number 5 for wr_id 77"
        " opcode 128  vendor error 244 qp_idx 3",
        FaultClass.NETWORK_FABRIC,
    ),
    (
        "[cn12:9001:0:9001] ib_mlx5_log.c:177  Transport retry count exceeded on mlx5_1:1/RoCE"
        " (synd 0x15 vend 0x81 hw_synd 0/0)",
        FaultClass.NETWORK_FABRIC,
    ),
    (
        "Fatal error in PMPI_Allreduce: Other MPI error, error stack:\n"
        "MPIDI_OFI_handle_cq_error(1062): OFI poll failed"
        " (ofi_events.c:1064:MPIDI_OFI_handle_cq_error:Input/output error)",
        FaultClass.NETWORK_FABRIC,
    ),
    # storage during saves: google-resumable-media, Arrow's S3 (Ray Train), gcsfs, ETIMEDOUT on
    # a mounted path, a Lustre client's RPC timeout
    (
        "google.resumable_media.common.InvalidResponse: ('Request failed with status code', 429,"
        " 'Expected one of', <HTTPStatus.OK: 200>, <HTTPStatus.PERMANENT_REDIRECT: 308>)",
        FaultClass.STORAGE_ERROR,
    ),
    (
        "(RayTrainWorker pid=811) OSError: When uploading part for key 'exp/checkpoint_000004/"
        "model.pt' in bucket 'runs': AWS Error SERVICE_UNAVAILABLE during UploadPart operation:"
        " Please reduce your request rate.",
        FaultClass.STORAGE_ERROR,
    ),
    ("gcsfs.retry.HttpError: Backend Error, 502", FaultClass.STORAGE_ERROR),
    (
        "OSError: [Errno 110] Connection timed out: '/mnt/filestore/ckpt/step_900/optimizer.pt'",
        FaultClass.STORAGE_ERROR,
    ),
    (
        "LustreError: 2201:0:(client.c:2300:ptlrpc_expire_one_request()) @@@ Request sent has"
        " timed out for sent delay: [sent 1700000001/real 0] req@ffff9 x17/t0(0)"
        " o4->work-OST0011-osc@10.2.0.4@o2ib:6/4",
        FaultClass.STORAGE_ERROR,
    ),
]


@pytest.mark.parametrize(("text", "fault_class"), STACK_WORDINGS_BY_CLASS)
def test_each_stacks_own_wording_names_its_class(text: str, fault_class: FaultClass) -> None:
    d = diag(text)
    assert d.fault_class is fault_class, d.summary


def test_horovods_mismatch_names_no_rank_and_stops_the_job() -> None:
    d = diag(
        "horovod.common.exceptions.HorovodInternalError: Mismatched allreduce tensor shapes: One"
        " rank sent a tensor of shape [10, 20], but another rank sent a tensor of shape [10, 21]."
    )
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == []
    assert d.action is RecoveryAction.STOP


def test_duplicate_gpu_names_the_rank_nccl_refused() -> None:
    d = diag(
        "n3:77:90 [0] init.cc:1423 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000"
    )
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == [1]


@pytest.mark.parametrize(
    "text",
    [
        # the allocator saying it is not a failure, in its newer words
        "Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.16GiB with"
        " freed_by_count=0. The caller indicates that this is not a failure, but this may mean"
        " that there could be performance gains if more memory were available.",
        # an object store refusing a request the job made wrongly
        "google.resumable_media.common.InvalidResponse: ('Request failed with status code', 403,"
        " 'Expected one of', <HTTPStatus.OK: 200>)",
        "OSError: When getting information for key 'ckpt' in bucket 'b': AWS Error ACCESS_DENIED"
        " during HeadObject operation: No response body.",
        # a socket (no path) timing out is no file system
        "requests.exceptions.ConnectionError: [Errno 110] Connection timed out",
        # a UCX transport merely unavailable
        "UCX  WARN  transport 'rc_mlx5' is not available, please use one or more of: tcp",
    ],
)
def test_near_misses_of_the_stack_wordings_decide_nothing_of_theirs(text: str) -> None:
    d = diag(text)
    assert d.fault_class not in (
        FaultClass.MEMORY_DEVICE_OOM,
        FaultClass.STORAGE_ERROR,
        FaultClass.NETWORK_FABRIC,
    ), d.summary


# -- validation-frameworks-18's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        # the toolkit's link-time libcuda loaded instead of the driver's, in each reporter's words
        "gpu3:9120:9144 [1] init.cc:1401 NCCL WARN Cuda failure 'CUDA driver is a stub library'",
        "RuntimeError: CUDA error: CUDA driver is a stub library\nCUDA kernel errors might be"
        " asynchronously reported at some other API call",
        "E0301 10:00:00.000000 77 cuda_driver.cc:152] failed call to cuInit:"
        " CUDA_ERROR_STUB_LIBRARY: CUDA driver is a stub library",
        # NCCL refusing the job's use of it, as Horovod and XLA put NCCL's error string after the call
        "[1,5]<stderr>:horovod.common.exceptions.HorovodInternalError: ncclCommInitRank failed:"
        " invalid usage",
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: NCCL operation ncclReduceScatter(send,"
        " recv, count, dtype, op, comm, stream) failed: invalid argument",
        # a C++ library's uncaught standard logic error, whatever launcher reports the abort
        "terminate called after throwing an instance of 'std::length_error'\n  what():  "
        "vector::_M_default_append\n[n1:4242] *** Process received signal ***",
    ],
)
def test_the_jobs_own_stack_refused_in_cuda_nccl_or_cpp_words_is_an_app_error(text: str) -> None:
    assert diag(text).fault_class is FaultClass.APP_ERROR


def test_horovods_nccl_refusal_names_the_rank_that_printed_it() -> None:
    d = diag("[1,3]<stderr>:RuntimeError: ncclCommInitRank failed: invalid usage")
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == [3]


@pytest.mark.parametrize(
    ("text", "fault_class"),
    [
        # NCCL's system and CUDA errors after the call stay the infrastructure's
        ("ncclCommInitRank failed: unhandled system error", FaultClass.NETWORK_FABRIC),
        # a runtime error or an allocation failure thrown by C++ is not a logic error
        (
            "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  "
            "std::bad_alloc",
            FaultClass.MEMORY_HOST_OOM,
        ),
    ],
)
def test_near_misses_of_the_jobs_own_stack_keep_their_class(
    text: str, fault_class: FaultClass
) -> None:
    assert diag(text).fault_class is fault_class


@pytest.mark.parametrize(
    ("text", "rank"),
    [
        # -9 kept in an unsigned byte by the launcher, and the plain 137, both name the process
        ("Process 4 exit with status code 247.", 4),
        ("worker 2 exited with exit code 137", 2),
    ],
)
def test_a_launchers_sigkill_status_is_a_weak_host_oom_on_the_process_it_names(
    text: str, rank: int
) -> None:
    d = diag(text)
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.culprit_ranks == [rank]
    assert d.action is RecoveryAction.RESTART


def test_an_aligned_host_allocation_refused_with_enomem_is_a_host_oom() -> None:
    d = diag(
        "paddle.fluid.core.EnforceNotMet: Enforce failed. Expected posix_memalign(&p, alignment,"
        " size) == 0, but received posix_memalign(&p, alignment, size):12 != 0:0.\n"
        "Alloc 1073741824 error! at [/paddle/paddle/fluid/memory/detail/system_allocator.cc:51]"
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM


# -- validation-frameworks-19's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    ("line", "host", "ranks"),
    [
        # the monitor's kill report cut right after its task description, with a rank in the name
        (
            "Memory on the node (IP: 10.4.0.12, ID: 9c1e77aa) where the task (task ID: 5d2a,"
            " name=trainer, rank=3,, pid=811, memory used",
            "10.4.0.12",
            [3],
        ),
        # an actor, whole, without a rank
        (
            "Memory on the node (IP: 172.31.5.9, ID: 77e0) where the actor (actor ID: 0a1b,"
            " name=RayTrainWorker.__init__, pid=912, memory used=30.1GB) was running was"
            " 61.2GB / 64.0GB (0.956), which exceeds the memory usage threshold of 0.95.",
            "172.31.5.9",
            [],
        ),
    ],
)
def test_rays_memory_monitor_names_the_node_and_a_named_rank_even_cut(
    line: str, host: str, ranks: list[int]
) -> None:
    d = diag(line)
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert (d.culprit_hosts, d.culprit_ranks) == ([host], ranks)


def test_rays_legacy_memory_monitor_is_the_hosts_memory_not_a_devices() -> None:
    d = diag(
        "ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node gpu-3 is"
        " used (58.1 / 61.0 GB). The top 5 memory consumers are:"
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    # a device's own OOM keeps its class
    assert diag("torch.OutOfMemoryError: CUDA out of memory.").fault_class is (
        FaultClass.MEMORY_DEVICE_OOM
    )


def _watchdog(rank: int, seq: int, op: str = "_ALLGATHER_BASE") -> str:
    return (
        f"[E ProcessGroupNCCL.cpp:719] [Rank {rank}] Watchdog caught collective operation"
        f" timeout: WorkNCCL(SeqNum={seq}, OpType={op}, Timeout(ms)=1800000) ran for"
        " 1806456 milliseconds before timing out."
    )


@pytest.mark.parametrize(
    ("lines", "ranks"),
    [
        # rank 0 still on an earlier collective than ranks 1 and 2: it is behind
        ([_watchdog(1, 7561), _watchdog(0, 7559), _watchdog(2, 7561)], [0]),
        # every rank on the same work: all waited, nobody singled out
        ([_watchdog(0, 316), _watchdog(3, 316)], []),
        # a rank reporting works of several groups: the numbers do not compare
        ([_watchdog(3, 33), _watchdog(0, 257), _watchdog(0, 1032)], []),
        # different kinds of collective: not one sequence
        ([_watchdog(0, 12, "BROADCAST"), _watchdog(1, 40, "ALLREDUCE")], []),
        # one reporter alone names nobody
        ([_watchdog(5, 9)], []),
    ],
)
def test_the_rank_whose_watchdog_timed_out_on_an_earlier_collective_is_behind(
    lines: list[str], ranks: list[int]
) -> None:
    d = diag("\n".join(lines))
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == ranks


# -- validation-frameworks-20's misses, generalised --------------------------------------------

_HOROVOD_STALL = (
    "[2023-06-26 07:23:58.477178: W horovod/common/stall_inspector.cc:107] One or more tensors were"
    " submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for"
    " remainder of ranks for more than 60 seconds. This may indicate that different ranks are"
    " trying to submit different tensors or that only subset of ranks is submitting tensors,"
    " which will cause deadlock."
)


@pytest.mark.parametrize(
    ("rank_lines", "ranks"),
    [
        # Horovod's PyTorch binding names a request "<collective>.<tensor>", behind horovodrun's tag
        (
            [
                "[0] Missing ranks:",
                "[0] 0: [broadcast.conv1.bias, broadcast.conv1.weight ...]",
                "[0] 2: [broadcast.conv1.bias, broadcast.conv1.weight ...]",
            ],
            [0, 2],
        ),
        # an unnamed request and the "!" the inspector adds when it will shut the rank down
        (
            [
                "[1,0]<stderr>:Missing ranks:",
                "[1,0]<stderr>:3!: [allreduce.noname.12, allreduce.noname.13]",
            ],
            [3],
        ),
        # Gloo's horovodrun tag with its stream
        (["[0]<stderr>:Stalled ranks:", "[0]<stderr>:5: [allgather.embeddings]"], [5]),
    ],
)
def test_horovods_stall_lists_name_ranks_whatever_binding_named_the_tensors(
    rank_lines: list[str], ranks: list[int]
) -> None:
    d = diag("\n".join([_HOROVOD_STALL, *rank_lines]))
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == ranks


def test_a_rank_label_before_a_bracket_that_is_no_horovod_tensor_names_nobody() -> None:
    # srun -l labels and ordinary bracketed text are no stall list
    d = diag(
        "\n".join(
            [
                _HOROVOD_STALL,
                "0: [broadcast] sending 12 tensors",
                "1: [allreduce_time_ms=12.5]",
            ]
        )
    )
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == []


@pytest.mark.parametrize(
    "report",
    [
        # the paste starts at the report, below the ResourceExhaustedError's own line
        "Current usage from device: /job:localhost/replica:0/task:0/device:GPU:0, allocator:"
        " GPU_0_bfc\n  450.14MiB from shared_model/unet_01/BiasAdd\n  450.00MiB from"
        " shared_model/unet_00/Conv2D",
        # a multi-worker job's report for another task's accelerator
        "Current usage from device: /job:worker/replica:0/task:1/device:GPU:3, allocator:"
        " GPU_3_bfc\n  3.81GiB from test_random2/RandomStandardNormal",
    ],
)
def test_tensorflows_oom_allocation_report_is_a_device_oom(report: str) -> None:
    assert diag(report).fault_class is FaultClass.MEMORY_DEVICE_OOM


def test_tensorflows_allocation_report_for_the_host_cpu_is_no_device_oom() -> None:
    d = diag(
        "Current usage from device: /job:localhost/replica:0/task:0/device:CPU:0, allocator:"
        " cpu\n  2.00GiB from input_pipeline/Batch"
    )
    assert d.fault_class is not FaultClass.MEMORY_DEVICE_OOM


# -- validation-frameworks-21's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "status",
    [
        # PyTorch/XLA's XRT client: the TPU worker's task prefix ends the status's first line
        "RuntimeError: Resource exhausted: From /job:tpu_worker/replica:0/task:0:\n"
        "Attempting to reserve 3.95G at the bottom of memory. That was not possible. There are"
        " 1.92G free, 0B reserved, and 1.92G reservable.; \nHBM capacity 8.00G:",
        # TensorFlow's TPU session: the same split behind a numbered root error
        "  (0) Resource exhausted: From /job:worker/replica:0/task:0:\n"
        "  Attempting to allocate 512.00M. That was not possible. There are 301.25M free. Due to"
        " fragmentation, the largest contiguous region of free memory is 120.00M.; (0x0x0_HBM0)",
    ],
)
def test_the_tpu_runtimes_failed_reservation_on_its_own_line_is_a_device_oom(status: str) -> None:
    assert diag(status).fault_class is FaultClass.MEMORY_DEVICE_OOM


@pytest.mark.parametrize(
    "line",
    [
        # a scheduler's slot reservation, in the same words but for no memory
        "INFO attempting to reserve 2 slots for the job. That was not possible. There are 1 free"
        " hosts",
        # the attempt alone, before the runtime says whether it worked
        "Attempting to reserve 3.95G at the bottom of memory.",
    ],
)
def test_a_reservation_that_is_no_failed_tpu_allocation_is_no_device_oom(line: str) -> None:
    assert diag(line).fault_class is not FaultClass.MEMORY_DEVICE_OOM


# -- validation-frameworks-22's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        # a failed Ray job's tail: the memory monitor's top users and its advice, the report's
        # first line lost to the 20,000-character truncation
        "Status message: Job entrypoint command failed with exit code 1, last available logs"
        " (truncated to 20,000 chars):\n95412   14.05   ray::LLMRayActor\n95410   13.86   ray::LLMRayActor\n"
        "Refer to the documentation on how to address the out of memory issue:"
        " https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider"
        " provisioning more memory on this node or reducing task parallelism by requesting more CPUs"
        " per task. Set max_restarts and max_task_retries to enable retry when the task crashes due"
        " to OOM.",
        # the raylet's summary, behind the driver's (raylet) prefix, kept without its header line
        "(raylet) \n(raylet) Refer to the documentation on how to address the out of memory issue:"
        " https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider"
        " provisioning more memory on this node or reducing task parallelism by requesting more CPUs"
        " per task. To adjust the kill threshold, set the environment variable"
        " `RAY_memory_usage_threshold` when starting Ray.",
    ],
)
def test_rays_oom_kill_advice_alone_is_a_host_oom(tail: str) -> None:
    d = diag(tail)
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert not d.culprit_hosts


@pytest.mark.parametrize(
    "line",
    [
        # the documentation page named where nothing was killed
        "INFO memory monitor enabled, see https://docs.ray.io/en/latest/ray-core/scheduling/"
        "ray-oom-prevention.html to tune RAY_memory_usage_threshold",
        # the advice's opening words cut before the page they point to
        "Refer to the documentation on how to address the out of memory issue",
    ],
)
def test_the_oom_prevention_page_without_the_kill_advice_is_no_host_oom(line: str) -> None:
    assert diag(line).fault_class is not FaultClass.MEMORY_HOST_OOM


# -- validation-frameworks-23's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # T5X (JAX) on a TPU VM: the loader's fatal check, then Python's abort
        "2022-08-20 21:51:52.172999: F external/org_tensorflow/tensorflow/core/tpu/"
        "tpu_library_init_fns.inc:100] TpuEmbeddingEngine_CollateMemory not available in this"
        " library.\nFatal Python error: Aborted",
        # JAX training behind a shell that reports the abort
        "2022-02-23 17:35:25.749201: F external/org_tensorflow/tensorflow/core/tpu/"
        "tpu_library_init_fns.inc:104] TpuEmbeddingEngine_WriteParameters not available in this"
        " library.\nAborted (core dumped)",
        # PyTorch/XLA: the same loader, then the abort's own stack report
        "2022-10-18 09:11:20.075933: F ./tensorflow/core/tpu/tpu_library_init_fns.inc:100]"
        " TpuEmbeddingEngine_CollateMemory not available in this library.\n"
        "*** SIGABRT received by PID 31731 (TID 31731) on cpu 47 from PID 31731; stack trace: ***\n"
        "PC: @     0x7fba61c0600b  (unknown)  raise",
        # an older loader that only logs the missing function before failing
        "E tensorflow/core/tpu/tpu_api_dlsym_initializer.cc:41] TpuCompile_CompileAndBuild not"
        " available in this library.",
    ],
)
def test_a_libtpu_missing_the_frameworks_functions_is_a_setup_error_not_a_crash(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP
    assert not d.culprit_hosts and not d.culprit_ranks


@pytest.mark.parametrize(
    "line",
    [
        # the same words from software that is no TPU library loader
        "The demo player is not available in this library.",
        "Error: Not available in this library. Use @grpc/proto-loader and loadPackageDefinition"
        " instead",
        # the loader's other refusal names no missing function
        "Unimplemented: You must statically link in a TPU library.",
    ],
)
def test_not_available_in_this_library_outside_the_tpu_loader_is_no_setup_error(line: str) -> None:
    assert diag(line).fault_class is not FaultClass.APP_ERROR


# -- validation-frameworks-24's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # XGBoost's distributed training: dmlc's check raised as the framework's exception
        "xgboost.core.XGBoostError: [10:12:13] /workspace/src/learner.cc:1024: Check failed:"
        " mparam_.num_feature != 0 (0 vs. 0) : 0 feature is supplied.  Are you using raw"
        " Booster interface?",
        # MXNet under mpirun: a rank's kvstore check, Open MPI's tag names the rank
        "[1,3]<stderr>:mxnet.base.MXNetError: [02:31:09] src/kvstore/./kvstore_dist.h:205:"
        " Check failed: !(num_servers == 0 && num_workers == 1) dist_sync with one worker and no"
        " server is not supported",
        # a ps-lite server: the uncaught dmlc::Error's what(), then C++'s terminate
        "terminate called after throwing an instance of 'dmlc::Error'\n"
        "  what():  [10:41:05] src/kvstore/kvstore_dist_server.h:312: Check failed: updater_ ",
        # dmlc's own print of a failed check, before the exception reaches Python
        "[18:20:22] src/io/local_filesys.cc:199: Check failed: allow_null  LocalFileSystem::Open"
        ' "data/train.rec": No such file or directory',
        # TVM's runtime, the same header
        "tvm._ffi.base.TVMError: [09:00:01] /tvm/src/runtime/module.cc:88: Check  notnull:"
        " f Loader of so(runtime.module.loadfile_so) is not presented.",
    ],
)
def test_a_failed_dmlc_check_is_an_error_of_the_job(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP
    assert not d.culprit_hosts


def test_a_dmlc_check_names_the_rank_its_launcher_tags() -> None:
    d = diag(
        "[1,3]<stderr>:mxnet.base.MXNetError: [02:31:09] src/kvstore/./kvstore_dist.h:205:"
        " Check failed: !(num_servers == 0 && num_workers == 1) dist_sync with one worker and no"
        " server is not supported"
    )
    assert d.culprit_ranks == [3]


@pytest.mark.parametrize(
    ("log", "fault_class"),
    [
        # the device's words inside the framework's exception keep their class
        (
            "mxnet.base.MXNetError: [09:13:35] src/storage/./pooled_storage_manager.h:157:"
            " cudaMalloc failed: out of memory",
            FaultClass.MEMORY_DEVICE_OOM,
        ),
        (
            "MXNetError: [07:14:22] src/engine/threaded_engine.cc:328: Check failed: e =="
            " cudaSuccess CUDA: an illegal memory access was encountered",
            FaultClass.CUDA_ERROR,
        ),
    ],
)
def test_a_dmlc_check_that_names_the_device_keeps_the_devices_class(
    log: str, fault_class: FaultClass
) -> None:
    assert diag(log).fault_class is fault_class


@pytest.mark.parametrize(
    "line",
    [
        # dmlc's other fatal messages say nothing about whose fault it was
        "xgboost.core.XGBoostError: [10:12:13] /workspace/src/collective/socket.h:100: Failed to"
        " connect to 10.0.0.2:9091: Connection refused",
        # dmlc's informational lines carry the same header
        "[12:00:01] src/io/iter_image_recordio_2.cc:172: ImageRecordIOParser2: data/train.rec,"
        " use 4 threads for decoding..",
        "[08:41:20] Start training with [gpu(0), gpu(1)]",
    ],
)
def test_dmlc_lines_that_are_no_failed_check_are_no_error_of_the_job(line: str) -> None:
    assert diag(line).fault_class is not FaultClass.APP_ERROR


@pytest.mark.parametrize(
    "log",
    [
        # MXNet asked for a GPU context on a CPU-only build
        "mxnet.base.MXNetError: [11:02:37] src/storage/storage.cc:78: Compile with USE_CUDA=1"
        " to enable GPU usage",
        # Caffe's tools, a glog fatal naming the switch
        "F0101 12:00:00.000000  1234 convert_imageset.cpp:150] This tool requires OpenCV;"
        " compile with USE_OPENCV.",
        # a dist kvstore on a build without it, dmlc's fatal log with its stack
        "[08:41:24] /opt/mxnet/dmlc-core/include/dmlc/./logging.h:300: [08:41:24]"
        " src/kvstore/kvstore.cc:37: compile with USE_DIST_KVSTORE=1 to use dist_async\n"
        "\n"
        "Stack trace returned 10 entries:\n"
        "[bt] (0) /opt/mxnet/lib/libmxnet.so(_ZN4dmlc15LogMessageFatalD1Ev+0x29) [0x7f3c89b1]",
    ],
)
def test_a_framework_built_without_the_feature_the_job_uses_is_a_setup_error(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP


@pytest.mark.parametrize(
    "line",
    ["cmake -DUSE_CUDA=1 -DUSE_DIST_KVSTORE=1 ..", "export USE_CUDA=1 USE_NCCL=1"],
)
def test_build_switches_named_without_a_refusal_are_no_setup_error(line: str) -> None:
    assert diag(line).fault_class is not FaultClass.APP_ERROR


@pytest.mark.parametrize(
    "log",
    [
        # PyTorch's conv on a layout cuDNN does not take
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you"
        " passed in a non-contiguous input.",
        # PaddlePaddle's fused conv kernel
        "ExternalError: CUDNN error(9), CUDNN_STATUS_NOT_SUPPORTED. \n"
        "  [Hint: 'CUDNN_STATUS_NOT_SUPPORTED'.  The functionality requested is not presently"
        " supported by cuDNN.  ] (at ../paddle/phi/kernels/fusion/gpu/fused_conv2d_add_act_kernel"
        ".cu:610)",
        # Caffe2's enforce, the status as a number and a name
        "terminate called after throwing an instance of 'caffe2::EnforceNotMet'\n"
        "  what():  [enforce fail at conv_op_cudnn.cc:580] status == CUDNN_STATUS_SUCCESS. 9 vs"
        " 0. , Error at: /src/caffe2/operators/conv_op_cudnn.cc:580: CUDNN_STATUS_NOT_SUPPORTED"
        " Error from operator:",
        # a glog check with the number only, then the abort
        "F0612 10:00:00.000000 77 cudnn_conv_layer.cpp:52] Check failed: status =="
        " CUDNN_STATUS_SUCCESS (9 vs. 0)\n*** Check failure stack trace: ***\nAborted (core"
        " dumped)",
        # a cuBLAS call the GPU's architecture cannot run
        "RuntimeError: cuDNN error: CUDNN_STATUS_ARCH_MISMATCH",
    ],
)
def test_cudnn_refusing_the_calls_parameters_is_an_error_of_the_job(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP
    assert not d.culprit_hosts


@pytest.mark.parametrize(
    ("line", "fault_class"),
    [
        # the cuDNN frontend's notes on plans it skips are no failure
        (
            "UserWarning: Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_"
            "DESCRIPTOR: cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED"
            " (Triggered internally at ../aten/src/ATen/native/cudnn/Conv_v8.cpp:919.)",
            None,
        ),
        # a kernel that failed on the device stays a CUDA error
        ("RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", FaultClass.CUDA_ERROR),
    ],
)
def test_cudnn_statuses_that_are_no_refused_call_keep_their_reading(
    line: str, fault_class: FaultClass | None
) -> None:
    d = diag(line)
    assert d.fault_class is not FaultClass.APP_ERROR
    if fault_class is not None:
        assert d.fault_class is fault_class


# -- validation-frameworks-25's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # OpenRLHF-style save under deepspeed: the zip writer's own refusal after its frames
        '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 652, in'
        " save\n    with _open_zipfile_writer(f) as opened_zipfile:\n"
        "RuntimeError: Parent directory /mnt/ckpt/actor/global_step40 does not exist.",
        # a rank prefix, a relative path
        "[rank7]: RuntimeError: Parent directory ./outputs/run-3/checkpoint-1200 does not exist.",
        # the message printed first and the frames after it, as a PR quotes it
        "RuntimeError: Parent directory /scratch/u12/ckpts/d26 does not exist.\n"
        '  File "trainer/checkpoint.py", line 51, in save_checkpoint\n'
        "    torch.save(optimizer_state, path)",
    ],
)
def test_torch_saving_into_a_missing_directory_is_the_jobs_path(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert not d.culprit_hosts


@pytest.mark.parametrize(
    "log",
    [
        # the Trainer's staging rename onto a directory another rank already filled
        "[rank2]: OSError: [Errno 39] Directory not empty: '/shared/out/tmp-checkpoint-c1x9'"
        " -> '/shared/out/checkpoint-400'",
        # checkpoint rotation racing a writer, shutil.rmtree's own frame
        '  File "/usr/lib/python3.11/shutil.py", line 763, in rmtree\n'
        "    os.rmdir(path, dir_fd=dir_fd)\n"
        "OSError: [Errno 39] Directory not empty: 'checkpoint-1000'",
        # macOS/BSD numbering
        "OSError: [Errno 66] Directory not empty: 'ckpt/tmp' -> 'ckpt/epoch_3'",
    ],
)
def test_a_checkpoint_directory_not_empty_is_the_jobs_state_not_storage(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is not RecoveryAction.DRAIN_AND_RESTART


def test_a_directory_not_empty_names_the_rank_that_raised_it() -> None:
    d = diag(
        "[rank6]: OSError: [Errno 39] Directory not empty: 'o/tmp-checkpoint-9' -> 'o/checkpoint-9'"
    )
    assert d.culprit_ranks == [6]


@pytest.mark.parametrize(
    "log",
    [
        # DeepSpeed's pdsh runner to a worker whose key is not authorised
        "[2025-02-11 08:01:13,410] [INFO] [runner.py:571:main] cmd = pdsh -S -f 1024 -w"
        " gpu-a,gpu-b export PYTHONPATH=/work; cd /work; python -u -m"
        " deepspeed.launcher.launch --world_info=eyJn --node_rank=%n train.py\n"
        "gpu-b: trainer@gpu-b: Permission denied (publickey,gssapi-keyex,gssapi-with-mic).\n"
        "pdsh@gpu-a: gpu-b: ssh exited with exit code 255",
        # an unknown host key under StrictHostKeyChecking
        "gpu-b: Host key verification failed.\npdsh@gpu-a: gpu-b: ssh exited with exit code 255",
        # pdsh's prefix alone names the host that refused, which is not blamed
        "node-07: Host key verification failed.",
        # mpirun's ssh launch of its daemon
        "Permission denied (publickey,password).\n"
        "--------------------------------------------------------------------------\n"
        "ORTE was unable to reliably start one or more daemons.",
    ],
)
def test_ssh_refusing_the_launchers_login_is_a_setup_error_not_a_lost_node(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.fault_class is not FaultClass.NODE_LOST
    assert not d.culprit_hosts


@pytest.mark.parametrize(
    "line",
    [
        # the same words from the job's own file access: not ssh
        "PermissionError: [Errno 13] Permission denied: '/data/ckpt/model.pt'",
        "rm: cannot remove 'ckpt/step_9': Permission denied",
        # pdsh's report alone, or a refused TCP connection: a host that is down prints them too
        "pdsh@node-01: node-07: ssh exited with exit code 255",
        "node-07: ssh: connect to host node-07 port 22: No route to host",
    ],
)
def test_other_permission_and_connection_words_are_no_ssh_setup_error(line: str) -> None:
    d = diag(line)
    assert not any(e.rule == "launcher.ssh_auth_refused" for e in [*d.evidence, *d.cascade])


# -- validation-frameworks-26's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # a deprecated GPU flag under JAX 0.4.28: one flag, XLA's own file and line
        "F0513 18:16:20.774312 139735000650880 parse_flags_from_env.cc:234] Unknown flag in"
        " XLA_FLAGS: --xla_gpu_enable_async_all_reduce=true\nFatal Python error: Aborted",
        # TensorFlow's own variable, the alternative suggested on the next line
        "2021-03-02 10:11:12.000000: F tensorflow/compiler/xla/parse_flags_from_env.cc:189]"
        " Unknown flags in TF_XLA_FLAGS: --xla_gpu_cuda_data_dir=/usr/local/cuda\n"
        "Perhaps you meant to specify these on the XLA_FLAGS envvar?",
        # the variable holds neither flags nor a readable file
        "F external/xla/xla/parse_flags_from_env.cc:157] Could not open file"
        ' "xla_dump_to=/tmp/hlo" to read flags for environment variable "XLA_FLAGS".',
    ],
)
def test_xla_refusing_the_jobs_flags_is_a_setup_error(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert any(e.rule == "python.xla_flags_unknown" for e in d.evidence)
    assert not d.culprit_hosts


@pytest.mark.parametrize(
    "line",
    [
        "FATAL Flags parsing error: Unknown command line flag 'learning_rat'",
        "WARNING: Unknown flags in hydra overrides: trainer.devices=8",
        "export XLA_FLAGS=--xla_force_host_platform_device_count=8",
    ],
)
def test_other_unknown_flag_words_are_not_xla_s_parser(line: str) -> None:
    d = diag(line)
    assert not any(e.rule == "python.xla_flags_unknown" for e in [*d.evidence, *d.cascade])


@pytest.mark.parametrize(
    "log",
    [
        # MultiWorkerMirroredStrategy's all-reduce after a dataset without repeat()
        "2020-02-10 09:14:21.031507: W tensorflow/core/common_runtime/base_collective_executor."
        "cc:217] BaseCollectiveExecutor::StartAbort Out of range: End of sequence\n"
        "\t [[{{node IteratorGetNext}}]]\n"
        "2020-02-10 09:14:21.031600: E tensorflow/core/common_runtime/ring_alg.cc:279] Aborting"
        " RingGather with Out of range: End of sequence",
        # TensorFlow 2.4's wording of the same abort, raised as the step's error
        "tensorflow.python.framework.errors_impl.OutOfRangeError: 3 root error(s) found.\n"
        "  (0) Out of range:  Collective ops is aborted by: [_Derived_]End of sequence\n"
        "The error could be from a previous operation. Restart your program to reset.",
    ],
)
def test_a_collective_aborted_by_the_end_of_the_input_is_the_jobs_pipeline(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is not RecoveryAction.DRAIN_AND_RESTART
    assert not d.culprit_hosts


@pytest.mark.parametrize(
    "line",
    [
        # a collective aborted by a peer, not by the data
        "W tensorflow/core/common_runtime/base_collective_executor.cc:217]"
        " BaseCollectiveExecutor::StartAbort Unavailable: Connection reset by peer",
        # the end of the input outside a collective: a loop's normal end
        "INFO:tensorflow:Reached end of input: OutOfRangeError: End of sequence",
    ],
)
def test_other_aborts_and_ends_of_sequence_are_not_the_input_exhausted(line: str) -> None:
    d = diag(line)
    assert not any(
        e.rule == "python.tf_collective_input_exhausted" for e in [*d.evidence, *d.cascade]
    )


@pytest.mark.parametrize(
    "log",
    [
        # a Keras generator raising inside tf.data's py_function: Unknown, new spelling
        "2023-08-01 12:00:01.000001: W tensorflow/core/framework/op_kernel.cc:1828]"
        " UNKNOWN: IndexError: list index out of range\nTraceback (most recent call last):\n\n"
        '  File "/usr/local/lib/python3.10/dist-packages/tensorflow/python/ops/script_ops.py",'
        " line 268, in __call__\n    ret = func(*args)",
        # TypeError as InvalidArgument, raised as the step's error under a strategy
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: 2 root error(s) found.\n"
        "  (0) Invalid argument:  TypeError: 'NoneType' object is not subscriptable",
    ],
)
def test_a_python_exception_inside_a_tensorflow_op_is_the_jobs_code(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert not d.culprit_hosts


@pytest.mark.parametrize(
    "line",
    [
        "W tensorflow/core/framework/op_kernel.cc:1741] Unknown: MemoryError: Unable to allocate"
        " 8.00 GiB for an array with shape (1073741824,) and data type float64",
        "W tensorflow/core/framework/op_kernel.cc:1741] Unknown: ConnectionResetError: [Errno 104]"
        " Connection reset by peer",
        "  (0) Unknown:  ResourceExhaustedError: OOM when allocating tensor with shape[64,1024]",
    ],
)
def test_host_memory_sockets_and_tensorflow_errors_through_a_py_function_are_not_read_so(
    line: str,
) -> None:
    d = diag(line)
    assert not any(e.rule == "python.tf_pyfunc_exception" for e in [*d.evidence, *d.cascade])


@pytest.mark.parametrize(
    "log",
    [
        # XLA on GPU: no handle before any kernel ran, a library that does not match the build
        "2023-05-20 20:08:18.894443: E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:439]"
        " Could not create cudnn handle: CUDNN_STATUS_NOT_INITIALIZED\n"
        "2023-05-20 20:08:18.894540: E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:443]"
        " Memory usage: 707198976 bytes free, 4231397376 bytes total.",
        # TensorFlow's cuBLAS handle at start-up
        "E tensorflow/stream_executor/cuda/cuda_blas.cc:238] failed to create cublas handle:"
        " CUBLAS_STATUS_NOT_INITIALIZED",
    ],
)
def test_a_gpu_library_handle_that_cannot_be_created_is_the_jobs_setup(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.fault_class is not FaultClass.CUDA_ERROR


def test_a_handle_allocation_failure_stays_the_devices_memory_and_a_kernel_failure_cuda() -> None:
    assert diag("Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED").fault_class is (
        FaultClass.MEMORY_DEVICE_OOM
    )
    assert diag("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR").fault_class is (
        FaultClass.CUDA_ERROR
    )


def test_a_gpu_kernel_launch_out_of_memory_names_every_rank_that_printed_it() -> None:
    d = diag(
        "[1,3]<stderr>:2021-05-04 22:39:11.526981: F ./tensorflow/core/kernels/reduction_gpu_"
        "kernels.cu.h:646] Non-OK-status: GpuLaunchKernel(BlockReduceKernel<T*, OUT_T,"
        " num_threads, Op>, num_blocks, num_threads, 0, cu_stream, in, out, in_size, op, init)"
        " status: INTERNAL: out of memory\n"
        "[1,5]<stderr>:2021-05-04 22:39:12.000101: W tensorflow/core/framework/op_kernel.cc:"
        "1767] OP_REQUIRES failed at random_op.cc:77 : Resource exhausted: OOM when allocating"
        " tensor with shape[4096,4096] and type float on /job:localhost/replica:0/task:0/"
        "device:GPU:0 by allocator GPU_0_bfc"
    )
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM
    assert d.culprit_ranks == [3, 5]


def test_another_gpu_kernel_launch_failure_is_not_an_out_of_memory() -> None:
    d = diag(
        "F ./tensorflow/core/kernels/split_lib_gpu.cu.cc:216] Non-OK-status:"
        " GpuLaunchKernel(SplitOpKernel<T>, config.block_count, config.thread_per_block, 0,"
        " d.stream(), input) status: Internal: misaligned address"
    )
    assert d.fault_class is not FaultClass.MEMORY_DEVICE_OOM


# -- validation-frameworks-27's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # PRRTE (Open MPI 5) asked for more processes than the hostfile's slots
        "--------------------------------------------------------------------------\n"
        "There are not enough slots available in the system to satisfy the 16\n"
        "slots that were requested by the application:\n"
        "\n"
        "  /opt/venv/bin/python\n"
        "\n"
        "Either request fewer slots for your application, or make more slots\n"
        "available for use.",
        # a binary present on the launching node only; the block names the node that lacked it
        "mpirun was unable to launch the specified application as it could not access\n"
        "or execute an executable:\n"
        "\n"
        "Executable: ./attention-mpi\n"
        "Node: rdma5\n"
        "\n"
        "while attempting to start process rank 8.",
        # an option misspelt, taken as the program
        "mpiexec was unable to find the specified executable file, and therefore\n"
        "did not launch the job.  This error was first reported for process\n"
        "rank 0; it may have occurred for other processes as well.\n"
        "Node:       gpu-node-03\n"
        "Executable: --bind-too",
        # MPICH's hydra on a script without its execute bit
        "[proxy:0:1@cn0412.cluster] HYDU_create_process (lib/utils/launch.c:73): execvp error"
        " on file ./train_hvd.py (Permission denied)",
    ],
)
def test_the_mpi_launcher_refusing_the_jobs_command_line_is_a_setup_error(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP
    assert not d.culprit_hosts


@pytest.mark.parametrize(
    "log",
    [
        # dash as the remote login shell, PRRTE's daemon off its PATH
        "sh: 1: prted: not found\n"
        "--------------------------------------------------------------------------\n"
        "PRTE was unable to reliably start one or more daemons.",
        # zsh, MPICH's proxy
        "zsh:1: command not found: hydra_pmi_proxy",
        # Open MPI installed at another prefix on the remote host
        "bash: /opt/openmpi-4.1.5/bin/orted: No such file or directory\n"
        "--------------------------------------------------------------------------\n"
        "ORTE was unable to reliably start one or more daemons.",
        # pdsh's prefix: DeepSpeed's launcher starting a conda interpreter absent on worker-2
        "worker-2: bash: /opt/conda/envs/ds/bin/python: No such file or directory\n"
        "pdsh@worker-1: worker-2: ssh exited with exit code 127",
        # horovodrun's task launch over ssh
        "Launching horovod task function was not successful:\n"
        "bash: line 1: /home/u/.venv/bin/python3.11: No such file or directory",
    ],
)
def test_a_launchers_program_missing_on_a_remote_host_is_a_setup_error_not_a_lost_node(
    log: str,
) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.fault_class is not FaultClass.NODE_LOST
    assert not d.culprit_hosts


@pytest.mark.parametrize(
    "line",
    [
        # the daemons' banner alone, a refused connection: a host that is down prints them too
        "ORTE was unable to reliably start one or more daemons.",
        "ssh: connect to host node-17 port 22: Connection refused",
        # the advice lines of the help texts, and other programs the shells miss
        "Either request fewer slots for your application, or make more slots available",
        "bash: nvidia-smi: command not found",
        "bash: /data/run_pretrain.sh: No such file or directory",
        "python: can't open file '/work/train.py': [Errno 2] No such file or directory",
    ],
)
def test_launch_words_that_name_no_refused_launch_are_not_read_as_one(line: str) -> None:
    d = diag(line)
    assert not any(
        e.rule in {"launcher.mpi_launch_refused", "launcher.remote_program_missing"}
        for e in [*d.evidence, *d.cascade]
    )


@pytest.mark.parametrize(
    "log",
    [
        # Paddle 2.x raising the place its build lacks
        "Traceback (most recent call last):\n"
        '  File "tools/train.py", line 172, in <module>\n'
        "    main()\n"
        "NotImplementedError: (Unimplemented) CUDAPlace is not supported. Please re-compile with"
        " WITH_GPU option. (at /paddle/paddle/fluid/platform/device_context.cc:152)",
        # Paddle 1.x under its core module's enforce
        "paddle.fluid.core_avx.EnforceNotMet: 'Place' is not supported, Please re-compile with"
        " WITH_GPU option at [/paddle/paddle/fluid/platform/device_context.cc:32]",
        # the Python side's refusal of an IPU strategy on a build without it
        "RuntimeError: Can not use IpuStrategy in non IPU compiled environment, please re-compile"
        " with WITH_IPU=ON.",
    ],
)
def test_paddle_refusing_what_its_build_lacks_is_a_setup_error(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP


@pytest.mark.parametrize(
    "line",
    [
        # the same words as Paddle's start-up warnings, after which it runs on
        "W0117 18:10:04.852438  2572 init.cc:56] 'GPU' is not supported, Please re-compile with"
        " WITH_GPU option",
        "W0301 09:00:00.000000   111 analysis_predictor.cc:600] 'MKLDNN' is not supported, Please"
        " re-compile with WITH_MKLDNN option",
    ],
)
def test_paddles_warning_about_a_missing_build_switch_is_no_failure(line: str) -> None:
    assert diag(line).fault_class is not FaultClass.APP_ERROR


# -- validation-frameworks-28's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # Intel VT-d on a 5.x kernel (PASID tag, hexadecimal reason), dmesg's time stamp in front
        "[Tue Mar  5 10:12:01 2024] DMAR: DRHD: handling fault status reg 3\n"
        "[Tue Mar  5 10:12:01 2024] DMAR: [DMA Read NO_PASID] Request device [3b:00.0] fault"
        " addr 0x7f4000 [fault reason 0x06] PTE Read access is not set",
        # an old kernel's two-line form, no space after the prefix
        "DMAR:[DMA Write] Request device [04:00.0] fault addr 1ff0000 \n"
        "DMAR:[fault reason 05] PTE Write access is not set",
        # AMD-Vi, the device in the event and in the GPU driver's prefix
        "[ 8123.442210] iommu ivhd0: AMD-Vi: Event logged [IO_PAGE_FAULT device=0000:41:00.0"
        " domain=0x000e address=0xfd000000 flags=0x0020]",
        "[ 8123.442210] nvidia 0000:41:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000e"
        " address=0xfd000000 flags=0x0020]",
    ],
)
def test_an_iommu_refusing_the_gpus_dma_is_a_hang_of_the_job(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.JOB_HANG
    assert d.culprit_hosts == []


def test_an_iommu_fault_leaves_an_error_the_job_printed_its_reading() -> None:
    fault = (
        "DMAR: [DMA Write] Request device [02:00.0] fault addr cd139000 [fault reason 05] PTE"
        " Write access is not set\n"
    )
    timeout = (
        "[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation"
        " timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1,"
        " Timeout(ms)=1800000) ran for 1800086 milliseconds before timing out."
    )
    assert diag(fault + timeout).fault_class is FaultClass.COLLECTIVE_TIMEOUT
    illegal = "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert diag(fault + illegal).fault_class is FaultClass.CUDA_ERROR


@pytest.mark.parametrize(
    "line",
    [
        # the IOMMU's start-up lines and an interrupt-remapping fault are no refused DMA
        "[    0.000000] DMAR: IOMMU enabled",
        "[    0.000000] DMAR-IR: Enabled IRQ remapping in x2apic mode",
        "DMAR: [INTR-REMAP] Request device [f0:1f.0] fault index 0x0 [fault reason 0x25] Blocked"
        " a compatibility format interrupt request",
        "pci 0000:00:00.2: AMD-Vi: Found IOMMU cap 0x40",
        "AMD-Vi: AMD IOMMUv2 loaded and initialized",
    ],
)
def test_iommu_lines_that_are_no_refused_dma_are_not_a_hang(line: str) -> None:
    assert diag(line).fault_class is not FaultClass.JOB_HANG


# -- validation-frameworks-29's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # Spark 3's wording, as the failed task's reason
        "23/02/11 04:13:55 WARN TaskSetManager: Lost task 12.0 in stage 4.0 (TID 91) (node5"
        " executor 3): ExecutorLostFailure (executor 3 exited caused by one of the running tasks)"
        " Reason: Container killed by YARN for exceeding physical memory limits. 11.1 GB of 11 GB"
        " physical memory used. Consider boosting spark.executor.memoryOverhead.",
        # Hadoop 2's NodeManager in the application master's diagnostics
        "Application application_1438831879245_0001 failed 2 times due to AM Container for"
        " appattempt_1438831879245_0001_000002 exited with exitCode: 143 due to: Container\n"
        "[pid=44545,containerID=container_1438831879245_0001_02_000001] is running beyond"
        " physical memory limits. Current usage: 1.0 GB of 1 GB physical memory used; 1.8 GB of"
        " 2.1 GB virtual memory used. Killing container.",
        # Hadoop 3's wording, the virtual limit
        "Container [pid=3730,containerID=container_1725006692302_0009_01_000003] is running"
        " 1723304448B beyond the 'VIRTUAL' memory limit. Current usage: 348.4 MB of 1 GB physical"
        " memory used; 3.7 GB of 2.1 GB virtual memory used. Killing container.",
    ],
)
def test_yarn_killing_a_container_over_its_memory_limit_is_host_memory(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.action is RecoveryAction.STOP


def test_yarn_names_the_executors_host_when_its_scheduler_reports_the_loss() -> None:
    d = diag(
        "19/07/02 11:20:31 ERROR YarnClusterScheduler: Lost executor 4 on dn-12.prod.example:"
        " Container killed by YARN for exceeding memory limits. 6.1 GB of 6 GB physical memory"
        " used. Consider boosting spark.yarn.executor.memoryOverhead or disabling"
        " yarn.nodemanager.vmem-check-enabled because of YARN-4714."
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.culprit_hosts == ["dn-12.prod.example"]


@pytest.mark.parametrize(
    "line",
    [
        "Container killed on request. Exit code is 143",
        "INFO YarnAllocator: Will request 4 executor container(s), each with 2 core(s) and 6144 MB"
        " memory (including 1024 MB of overhead)",
    ],
)
def test_yarn_containers_killed_for_other_reasons_are_not_host_memory(line: str) -> None:
    assert diag(line).fault_class is not FaultClass.MEMORY_HOST_OOM


@pytest.mark.parametrize(
    "log",
    [
        # the qualified name alone, its message cut by a paste
        "    raise value\nray.exceptions.OutOfMemoryError: Me",
        # under Ray Train's controller prefix
        "(TrainController pid=3312) ray.exceptions.OutOfMemoryError: Memory on the node (IP:"
        " 10.4.2.17, ID: 9c0e) where the lease (actor ID: 77ab, name=RayTrainWorker.__init__,"
        " pid=4021) was running was 249.1GB / 251.6GB (0.990021), which exceeds the memory usage"
        " threshold of 0.95.",
    ],
)
def test_rays_out_of_memory_exception_is_host_memory_whatever_its_message(log: str) -> None:
    assert diag(log).fault_class is FaultClass.MEMORY_HOST_OOM


@pytest.mark.parametrize(
    "log",
    [
        # NCCL 2.7's shm.h under Horovod's mpirun tags
        "[1,2]<stderr>:gpu-a:2211:2534 [2] include/shm.h:28 NCCL WARN Call to posix_fallocate"
        " failed : No space left on device\n"
        "[1,2]<stderr>:gpu-a:2211:2534 [2] include/shm.h:48 NCCL WARN Error while creating shared"
        " memory segment nccl-shm-recv-1462445a6f01cbfc-1-2-3 (size 9637888)",
        # NCCL 2.18+'s shmutils.cc: the segment could not be grown
        "trainer-0:412:530 [3] misc/shmutils.cc:77 NCCL WARN Error: failed to extend"
        " /dev/shm/nccl-Q2w3E4 to 9637892 bytes, error: No space left on device (28)",
        # as PyTorch's last error, which the fabric rule would otherwise read
        "torch.distributed.DistBackendError: NCCL error in:"
        " ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run"
        " with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or"
        " device error.\n"
        "Last error:\n"
        "Error while creating shared memory segment /dev/shm/nccl-7fKq2Z (size 7340384)",
        # ranks in containers that do not share an IPC namespace
        "node-a:77:91 [1] misc/shmutils.cc:87 NCCL WARN Error while attaching to shared memory"
        " segment /dev/shm/nccl-Zt81Pq (size 4194656), error: No such file or directory (2)",
    ],
)
def test_nccls_shared_memory_segment_failing_is_the_containers_setup(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP


@pytest.mark.parametrize(
    "line",
    [
        "OSError: [Errno 28] No space left on device: '/mnt/ckpt/global_step4000/mp_rank_00.pt'",
        "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 4096 vs 0 ..."
        " No space left on device",
    ],
)
def test_a_full_file_system_outside_nccls_segment_is_still_storage(line: str) -> None:
    assert diag(line).fault_class is FaultClass.STORAGE_ERROR


@pytest.mark.parametrize(
    "log",
    [
        # dmlc-core's stream under MXNet, as the framework's exception
        "mxnet.base.MXNetError: [09:12:55] src/io/local_filesys.cc:38: Check failed:"
        " std::fwrite(ptr, 1, size, fp_) == size FileStream.Write incomplete",
        # TVM's copy of the stream
        "tvm._ffi.base.TVMError: Traceback (most recent call last):\n"
        '  File "/opt/tvm/src/runtime/file_utils.h", line 120\n'
        "TVMError: Check failed: std::fwrite(ptr, 1, size, fp_) == size:"
        " SimpleBinaryFileStream.Write incomplete",
    ],
)
def test_a_short_write_in_dmlcs_file_stream_is_storage(log: str) -> None:
    assert diag(log).fault_class is FaultClass.STORAGE_ERROR


def test_dmlcs_other_checks_stay_the_jobs_error() -> None:
    d = diag(
        "[18:20:22] src/io/local_filesys.cc:199: Check failed: allow_null  LocalFileSystem::Open"
        ' "data/val.rec": No such file or directory'
    )
    assert d.fault_class is FaultClass.APP_ERROR


@pytest.mark.parametrize(
    "log",
    [
        "[rank0]: deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload"
        " with a client provided optimizer (<class 'torch.optim.adamw.AdamW'>) which in most cases"
        " will yield poor performance.",
        "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a DP"
        " world size of 64 but the current world size is 32. Automatic adjustment of ZeRO's"
        " optimizer state partitioning with a new world size is not currently supported.",
    ],
)
def test_zero_refusing_the_jobs_setup_is_the_jobs_error(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP


@pytest.mark.parametrize(
    "line",
    [
        "[rank=3] RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
        "[rank1]: ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
    ],
)
def test_a_gpu_process_group_without_a_visible_gpu_is_a_weak_setup_error(line: str) -> None:
    d = diag(line)
    assert d.fault_class is FaultClass.APP_ERROR
    assert not d.culprit_hosts


# -- validation-frameworks-30's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    ("log", "rank", "host"),
    [
        # PALS' host prefix (Aurora), a bus error without a core
        (
            "x4102c6s3b0n0: rank 17 died from signal 7\nx4102c6s3b0n0: rank 16 died from signal 15",
            17,
            "x4102c6s3b0n0",
        ),
        # the fully qualified host (Polaris), the SIGSEGV first, the teardown's SIGKILL after it
        (
            "x3006c0s19b1n0.hsn.cm.polaris.alcf.anl.gov: rank 2 died from signal 11 and dumped core\n"
            "x3006c0s1b0n0.hsn.cm.polaris.alcf.anl.gov: rank 5 died from signal 9",
            2,
            "x3006c0s19b1n0.hsn.cm.polaris.alcf.anl.gov",
        ),
        # without the host prefix
        ("rank 6 died from signal 4 and dumped core\nrank 0 died from signal 15", 6, None),
    ],
)
def test_pals_names_the_rank_that_died_of_a_fatal_signal(
    log: str, rank: int, host: str | None
) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == [rank]
    assert d.culprit_hosts == ([host] if host else [])


@pytest.mark.parametrize(
    "log",
    [
        # a walltime kill's SIGTERM to every rank, and an abort: no crash of their own
        "x1921c0s7b0n0: rank 3 died from signal 15\nx1921c0s7b0n0: rank 4 died from signal 15",
        "x3006c0s19b1n0.hsn.cm.polaris.alcf.anl.gov: rank 0 died from signal 6 and dumped core",
    ],
)
def test_pals_teardown_deaths_are_not_read_as_a_ranks_crash(log: str) -> None:
    rules = {e.rule for e in ENGINE.scan_lines(log.splitlines())}
    assert "launcher.pals_rank_signal_crash" not in rules
    assert "launcher.pals_rank_signal_crash" in {
        e.rule for e in ENGINE.scan_lines(["x4102c6s3b0n0: rank 17 died from signal 7"])
    }


@pytest.mark.parametrize(
    ("log", "ranks"),
    [
        # the endRanks form: the rank stopped between two collectives - it died
        (
            "*** SIGSEGV received at time=1712345678 on cpu 3 ***\n"
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE,"
            " NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600031 milliseconds before timing"
            " out.\n"
            "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:\n"
            "\t     [2] finished collective #87, but didn't join collective #88 (count from 1)",
            [2],
        ),
        # the missing-ranks form
        (
            "Segmentation fault (core dumped)\n"
            "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=BROADCAST,"
            " NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800002 milliseconds before timing out.\n"
            "\t - To our best knowledge, ranks [3] are the lagging ranks that caused this timeout. They"
            " never joined any collectives",
            [3],
        ),
    ],
)
def test_a_crash_with_no_rank_takes_the_rank_the_desync_report_says_stopped(
    log: str, ranks: list[int]
) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == ranks


def test_a_desync_report_listing_every_reporting_rank_singles_out_nobody_for_a_crash() -> None:
    d = diag(
        "Segmentation fault (core dumped)\n"
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE,"
        " NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n"
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE,"
        " NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
        "\t   - [0, 1] joined but didn't finish collective #9 (count from 1)"
    )
    assert d.fault_class is FaultClass.PROCESS_CRASH
    assert d.culprit_ranks == []


@pytest.mark.parametrize(
    "log",
    [
        # a DataLoader worker forked after CUDA was initialised, under torchrun's rank prefix
        "[rank3]: terminate called after throwing an instance of 'c10::Error'\n"
        "[rank3]:   what():  CUDA error: initialization error\n"
        "[rank3]: RuntimeError: DataLoader worker (pid 88121) is killed by signal: Aborted.",
        # PyTorch's lazy-init check refusing it
        "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with"
        " multiprocessing, you must use the 'spawn' start method",
        # old THC's wording
        "RuntimeError: cuda runtime error (3) : initialization error at"
        " /opt/conda/conda-bld/pytorch_1518244421288/work/torch/lib/THC/THCGeneral.c:70",
    ],
)
def test_cuda_used_in_a_forked_process_is_the_jobs_start_method(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.",
        "RuntimeError: DataLoader worker (pid 3345) is killed by signal: Segmentation fault.",
    ],
)
def test_a_driver_that_cannot_start_or_a_crashed_worker_is_not_a_fork_error(line: str) -> None:
    assert diag(line).fault_class is not FaultClass.APP_ERROR


# -- validation-frameworks-31's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # cuDF/cuML through Python, the CUDA allocation's own error named (older RMM)
        '  File "cudf/_lib/column.pyx", line 92, in cudf._lib.column.Column.__init__\n'
        "MemoryError: std::bad_alloc: out_of_memory: CUDA error at:"
        " /opt/conda/envs/rapids/include/rmm/mr/device/cuda_memory_resource.hpp:70:"
        " cudaErrorMemoryAllocation out of memory",
        # the pool sub-allocator that cannot grow, under a Dask worker's prefix
        "distributed.worker - ERROR - std::bad_alloc: out_of_memory: RMM failure at:"
        "/opt/conda/include/rmm/mr/device/pool_memory_resource.hpp:183: Maximum pool size exceeded",
        # newer RMM's wording with the size, from the async resource in a C++ abort
        "terminate called after throwing an instance of 'rmm::out_of_memory'\n"
        "  what():  std::bad_alloc: out_of_memory: CUDA error (failed to allocate 34359738368"
        " bytes) at: /usr/local/include/rmm/mr/device/cuda_async_view_memory_resource.hpp:109:"
        " cudaErrorMemoryAllocation out of memory",
    ],
)
def test_rmm_running_out_of_device_memory_is_the_devices(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM
    assert d.action is RecoveryAction.STOP


@pytest.mark.parametrize(
    "log",
    [
        # RCCL on a ROCm node, a launcher that gave the last rank the world size
        "gpu-n3:5521:5521 [0] init.cc:1402 NCCL WARN Invalid rank requested : 8/8",
        # as the Last error of PyTorch's exception, behind the rank prefix
        "[rank8]: torch.distributed.DistBackendError: NCCL error in:"
        " ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, invalid argument (run with"
        " NCCL_DEBUG=WARN for details), NCCL version 2.20.5\n"
        "[rank8]: ncclInvalidArgument: Invalid value for an argument.\n"
        "[rank8]: Last error:\n"
        "[rank8]: Invalid rank requested : 8/8",
    ],
)
def test_nccl_refusing_a_rank_outside_the_communicator_is_the_jobs_launch(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP


@pytest.mark.parametrize(
    "log",
    [
        # the locked-memory limit of a container (ENOMEM), host memory
        "ip-10-0-87-143:149:298 [5] register_mr_buffers:465 NCCL WARN NET/OFI Unable to register"
        " memory (type = 1) for device 0. RC: 12, Error: Cannot allocate memory",
        # a CUDA buffer refused with EINVAL, under a Ray Train worker's prefix
        "(RayTrainWorker pid=2210, ip=10.1.4.7) ip-10-1-4-7:2210:2301 [3] register_mr_buffers:544"
        " NCCL WARN NET/OFI Unable to register memory (type = 2) for device 0. RC: -22, Error:"
        " Invalid argument",
    ],
)
def test_the_efa_plugin_refusing_a_memory_registration_is_not_the_fabric(log: str) -> None:
    # a registration is local: the node's software stack or its limits (ENOMEM may also be read
    # as the host's memory), stop either way, never a drain
    d = diag(log)
    assert d.fault_class is not FaultClass.NETWORK_FABRIC
    assert d.action is RecoveryAction.STOP


def test_the_efa_plugin_failing_a_request_is_still_the_fabric() -> None:
    d = diag(
        "ip-10-0-1-5:77:99 [3] NCCL WARN NET/OFI Request 0x7f32a4 completed with error. RC: 21."
        " Error: unknown error. Completed length: 0, Request: { buffer_index: 255, dev: 0 }"
    )
    assert d.fault_class is FaultClass.NETWORK_FABRIC


# -- validation-frameworks-33's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # a plain pickle given to torch.load under a DDP rank's prefix, with the frame above it
        '[rank1]:   File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py",'
        " line 1033, in _legacy_load\n"
        '[rank1]:     raise RuntimeError("Invalid magic number; corrupt file?")\n'
        "[rank1]: RuntimeError: Invalid magic number; corrupt file?",
        # the second check of the legacy header: a pickle whose second object is not torch's protocol
        "Traceback (most recent call last):\n"
        '  File "resume.py", line 40, in <module>\n'
        '    state = torch.load(args.resume, map_location="cpu")\n'
        "RuntimeError: Invalid protocol version: 4",
    ],
)
def test_torch_load_of_a_file_that_is_not_a_torch_save_is_the_jobs(log: str) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.action is RecoveryAction.STOP


def test_a_truncated_torch_checkpoint_is_still_storage() -> None:
    d = diag(
        '  File "/usr/lib/python3/dist-packages/torch/serialization.py", line 1246, in _load\n'
        "RuntimeError: PytorchStreamReader failed reading file data/3: file read failed"
    )
    assert d.fault_class is FaultClass.STORAGE_ERROR


# -- validation-frameworks-34's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # Gaudi's PyTorch bridge: a device-memory allocation under the rank prefix it prints
        '[rank3]:   File "/usr/local/lib/python3.10/dist-packages/optimum/habana/transformers/trainer.py",'
        " line 845, in _inner_training_loop\n"
        "[rank3]: RuntimeError: [Rank:3] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::1073741824"
        " (1024)MB",
        # Gaudi's graph workspace, in a backward pass
        '  File "/usr/local/lib/python3.10/dist-packages/torch/autograd/__init__.py", line 251, in backward\n'
        "RuntimeError: FATAL ERROR :: MODULE:SYNHELPER workspace Allocation of size ::8589934592 failed!",
        # the Neuron runtime's TDRV report of an exhausted NeuronCore, on another core and usage
        "2025-Jun-11 03:22:41.551092 19022:19101 ERROR  TDRV:log_dev_mem                             Failed to"
        " allocate 2.000GB (usage: model shared scratchpad) on ND 5:NC 0, current utilization:\n"
        "\t* total: 23.912GB\n",
        "2025-Jun-11 03:22:41.560311 19022:19101 ERROR  TDRV:tensor_allocate                         Failed to"
        " allocate 33554432 bytes on DEVICE for tensor UNKNOWN.",
        # the NRT API's status for the same allocation
        'RuntimeError: nrt_tensor_allocate status=4 message="Allocation Failure"',
    ],
)
def test_a_non_cuda_runtimes_device_allocation_failure_is_device_oom(log: str) -> None:
    assert diag(log).fault_class is FaultClass.MEMORY_DEVICE_OOM


@pytest.mark.parametrize(
    "log",
    [
        # a host-side Neuron allocation is not the device
        "2025-Jun-11 03:22:41.560311 19022:19101 ERROR  TDRV:tensor_allocate                         Failed to"
        " allocate 4096 bytes on HOST for tensor UNKNOWN.",
        # a Gaudi already held by another process: not its memory
        "RuntimeError: synStatus=20 [Device already acquired] Device acquire failed.",
    ],
)
def test_other_accelerator_runtime_failures_are_not_device_oom(log: str) -> None:
    assert diag(log).fault_class is not FaultClass.MEMORY_DEVICE_OOM


def test_rocm_hsa_gpu_hang_is_a_gpu_runtime_error() -> None:
    d = diag(
        " 12%|#2        | 118/960 [1:02:11<7:23:40, 31.62s/it]HW Exception by GPU node-3 (Agent handle:"
        " 0x5581c2e0b4f0) reason :GPU Hang\n"
        "Aborted (core dumped)"
    )
    assert d.fault_class is FaultClass.CUDA_ERROR


def test_rocm_hsa_ecc_exception_is_the_gpu() -> None:
    d = diag(
        "HW Exception by GPU node-4 (Agent handle: 0x7f3a9c0d2e10) reason :ECC\nAborted (core dumped)"
    )
    assert d.fault_class is FaultClass.GPU_HARDWARE


# -- validation-frameworks-35's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # a store client already connected, waiting past a 10-minute timeout under a rank prefix
        "[rank5]:[W1107 02:11:40.123456789 socket.cpp:489] [c10d] waitForInput: socket"
        " SocketImpl(fd=41, addr=[gpu-node-2]:51022, remote=[gpu-node-1]:29500) timed out after"
        " 600000ms",
        # the poll that precedes it, from an older build without the rank prefix
        "[W socket.cpp:464] [c10d] waitForInput: poll for socket SocketImpl(fd=12,"
        " addr=[::ffff:10.0.0.5]:40112, remote=[::ffff:10.0.0.4]:23456) returned 0, likely a timeout",
        # DeepEP's host-side waits
        "[rank12]: RuntimeError: DeepEP error: timeout (combine CPU)",
        "RuntimeError: DeepEP error: CPU recv timeout",
        # DeepEP's device barrier on another rank and slot
        "DeepEP timeout check failed: rank = 13, thread = 2, value = 1024)",
    ],
)
def test_a_store_wait_or_a_deepep_barrier_timing_out_is_a_collective_timeout(log: str) -> None:
    assert diag(log).fault_class is FaultClass.COLLECTIVE_TIMEOUT


def test_a_monitored_barrier_names_the_ranks_that_never_arrived() -> None:
    d = diag(
        "[rank0]:[E1203 10:01:02.000000000 ProcessGroupGloo.cpp:143] [Rank 0]: Ranks 3, 5 failed to"
        " pass monitoredBarrier in 600000 ms\n"
        "[rank1]:[E1203 10:01:02.000000000 ProcessGroupGloo.cpp:143] Rank 1 successfully reached"
        " monitoredBarrier, but received errors while waiting for send/recv from rank 0. Please"
        " check rank 0 logs for faulty rank."
    )
    assert d.fault_class is FaultClass.COLLECTIVE_TIMEOUT
    assert d.culprit_ranks == [3, 5]


def test_a_pyspy_dump_with_the_main_thread_idle_is_a_hang() -> None:
    d = diag(
        "Process 48121: python train.py --config cfg.yaml\n"
        "Python v3.11.9 (/opt/venv/bin/python3.11)\n"
        "\n"
        'Thread 0x7F3E2C1B5740 (idle): "MainThread"\n'
        "    _recv_bytes (multiprocessing/connection.py:430)\n"
        "    recv (multiprocessing/connection.py:250)\n"
        "    _next_data (torch/utils/data/dataloader.py:1448)"
    )
    assert d.fault_class is FaultClass.JOB_HANG


def test_a_pyspy_dump_with_the_main_thread_running_is_no_hang() -> None:
    d = diag(
        'Thread 0x7F3E2C1B5740 (active): "MainThread"\n'
        "    forward (model.py:88)\n"
        'Thread 0x7F3E1A2B3700 (idle): "pin_memory_thread"\n'
        "    get (queue.py:180)"
    )
    assert d.fault_class is not FaultClass.JOB_HANG


def test_an_error_before_a_deepep_timeout_wins() -> None:
    d = diag(
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has"
        " a total capacity of 79.10 GiB of which 1.02 GiB is free.\n"
        "DeepEP timeout check failed: rank = 5, thread = 3, value = 1024)"
    )
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM


# -- validation-frameworks-36's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # cuBLAS's handle, under a torchrun rank prefix
        "[rank3]: RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling"
        " `cublasCreate(handle)`",
        # cuBLASLt's and cuSOLVER's, in the same PyTorch wrapper
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasLtCreate(&handle)`",
        "RuntimeError: CUDA error: CUSOLVER_STATUS_ALLOC_FAILED when calling"
        " `cusolverDnCreate(handle)`",
    ],
)
def test_a_gpu_library_allocation_in_pytorchs_cuda_error_is_a_device_oom(log: str) -> None:
    assert diag(log).fault_class is FaultClass.MEMORY_DEVICE_OOM


def test_a_gpu_library_kernel_failure_in_pytorchs_cuda_error_stays_a_cuda_error() -> None:
    d = diag(
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle,"
        " opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`"
    )
    assert d.fault_class is FaultClass.CUDA_ERROR


@pytest.mark.parametrize(
    ("log", "host"),
    [
        # the older report, naming the node
        (
            "2023-03-02 08:12:44,101\tWARNING worker.py:1866 -- Raylet is terminated:"
            " ip=10.12.0.31, id=9f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbc."
            " Termination is unexpected. Possible reasons include: (1) SIGKILL by the user or"
            " system OOM killer, (2) Invalid memory access from Raylet causing SIGSEGV or SIGBUS,"
            " (3) Other termination signals. Last 20 lines of the Raylet logs:",
            "10.12.0.31",
        ),
        # the newer one, forwarded by the driver with the agent's tag and no address
        (
            "(raylet, ip=10.12.0.44) Raylet is terminated. Termination is unexpected. Possible"
            " reasons include: (1) SIGKILL by the user or system OOM killer, (2) Invalid memory"
            " access from Raylet causing SIGSEGV or SIGBUS, (3) Other termination signals. Last 20"
            " lines of the Raylet logs:",
            None,
        ),
    ],
)
def test_a_raylet_terminated_unexpectedly_is_a_lost_node(log: str, host: str | None) -> None:
    d = diag(log)
    assert d.fault_class is FaultClass.NODE_LOST
    assert d.culprit_hosts == ([host] if host else [])


def test_a_raylet_stopped_gracefully_is_no_lost_node() -> None:
    d = diag("(raylet) Raylet is terminated. Termination is graceful.")
    assert d.fault_class is not FaultClass.NODE_LOST


def test_the_raylets_oom_killer_report_outranks_its_death() -> None:
    d = diag(
        "(raylet) [2024-05-02 11:00:01,000 E 811 811] (raylet) node_manager.cc:3069: 3 Workers"
        " (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other"
        " reasons at node (ID: 5c1d, IP: 10.12.0.31) over the last time period. To see more"
        " information about the Workers killed on this node, use `ray logs raylet.out -ip"
        " 10.12.0.31`\n"
        "(raylet, ip=10.12.0.31) Raylet is terminated. Termination is unexpected. Possible reasons"
        " include: (1) SIGKILL by the user or system OOM killer, (2) Invalid memory access from"
        " Raylet causing SIGSEGV or SIGBUS, (3) Other termination signals. Last 20 lines of the"
        " Raylet logs:"
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM


def test_the_signals_a_ray_report_lists_as_suspects_are_no_crash() -> None:
    d = diag(
        "OOM killer, (2) Invalid memory access from Raylet causing SIGSEGV or SIGBUS, (3) Other"
        " termination signals. Last 20 lines of the Raylet logs:"
    )
    assert d.fault_class is not FaultClass.PROCESS_CRASH


# -- validation-frameworks-37's misses, generalised --------------------------------------------


@pytest.mark.parametrize(
    "log",
    [
        # UCX's UD transport giving up on a silent peer, under srun -l and UCX's own prefix
        "57: [cn0412:88213:0:88213] ud_ep.c:271 Fatal: UD endpoint 0x1c2f3a0 to <no debug data>:"
        " unhandled timeout error",
        # a debug build naming the peer
        "[gpu-a17:5120:0:5120]       ud_ep.c:283  Fatal: UD endpoint 0x7f01 to gpu-a18:6611:"
        " unhandled timeout error",
        # the paste wrapped mid-line: the fatal's head alone
        "[r3n05:4021:0:4021]       ud_ep.c:280  Fatal: UD endpoint 0x203e6d10 to <no de",
    ],
)
def test_ucx_giving_up_on_a_ud_endpoint_is_the_fabric(log: str) -> None:
    assert diag(log).fault_class is FaultClass.NETWORK_FABRIC


@pytest.mark.parametrize(
    "log",
    [
        "[cn0412:88213:0:88213] ud_ep.c:1025 UCX  DEBUG created ep ep=0x1c2f3a0 iface=0x1b00 id=3",
        "UD endpoint 0x1c2f3a0 to cn0413:2231 connected",
    ],
)
def test_ud_endpoint_lines_that_report_no_failure_are_not_the_fabric(log: str) -> None:
    assert diag(log).fault_class is not FaultClass.NETWORK_FABRIC


@pytest.mark.parametrize("label", ["0: ", "  0: ", "12: "])
def test_slurmstepd_s_own_line_under_an_srun_label_names_no_rank(label: str) -> None:
    d = diag(
        f"{label}slurmstepd: error: Detected 2 oom_kill events in StepId=88121.0. Some of the step"
        " tasks have been OOM Killed."
    )
    assert d.fault_class is FaultClass.MEMORY_HOST_OOM
    assert d.culprit_ranks == []


def test_a_right_aligned_srun_label_names_its_task() -> None:
    d = diag(
        " 913: Traceback (most recent call last):\n"
        ' 913:   File "train.py", line 88, in <module>\n'
        " 913: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a"
        " total capacity of 79.10 GiB of which 1.02 GiB is free."
    )
    assert d.fault_class is FaultClass.MEMORY_DEVICE_OOM
    assert d.culprit_ranks == [913]


def test_open_mpi_s_fatal_banner_names_the_rank_that_hit_the_error() -> None:
    d = diag(
        "[cn118:40211] *** An error occurred in MPI_Allgatherv\n"
        "[cn118:40211] *** reported by process [3044671489,57]\n"
        "[cn118:40211] *** on communicator MPI_COMM_WORLD\n"
        "[cn118:40211] *** MPI_ERR_COUNT: invalid count argument\n"
        "[cn118:40211] *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,\n"
        "[cn118:40211] ***    and potentially your MPI job)"
    )
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == [57]
    assert d.culprit_hosts == ["cn118"]


def test_a_garbled_reporter_pair_names_no_rank() -> None:
    d = diag(
        "[cn118:40211] *** An error occurred in MPI_Waitall\n"
        "[cn118:40211] *** reported by process [4461265905046126592,4461274545734550268]\n"
        "[cn118:40211] *** MPI_ERR_TRUNCATE: message truncated"
    )
    assert d.fault_class is FaultClass.APP_ERROR
    assert d.culprit_ranks == []
