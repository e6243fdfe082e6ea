"""Failure families the fourth validation set showed, written here in variants it does not
contain: checkpoint reads, launch errors, Windows crashes, gloo timeouts, interrupted launchers,
Open MPI's older wording, masked host names, ranks named by the traceback around a line."""

from __future__ import annotations

from resurrect.contracts import Diagnosis, FaultClass, RecoveryAction
from resurrect.rules import diagnose_lines, load_engine
from resurrect.rules.text import is_placeholder_host

ENGINE = load_engine()


def diag(text: str) -> Diagnosis:
    return diagnose_lines(text.strip("\n").splitlines(), file="job.log", engine=ENGINE)


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


def test_placeholders_are_told_from_host_names() -> None:
    for masked in ("xxxxxxxx", "XXX.XXX.XXX.XXX", "***", "HOSTNAME", "<node>", "your_hostname"):
        assert is_placeholder_host(masked), masked
    for real in ("gpu-3", "node12", "10.0.0.7", "x1", "hostile-04", "ip-10-1-2-3.ec2.internal"):
        assert not is_placeholder_host(real), real


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
