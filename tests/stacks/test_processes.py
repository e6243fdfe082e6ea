"""Which processes are a job's ranks: the kernel says which job (cgroup or step daemon), the
uid must be the owner's, the environment only labels ranks within the job; each launcher
shape yields one process per rank. CONSTRUCTED /proc trees (tests/support/fake_proc.py);
the real ones are in tests/e2e/test_launchers_on_slurm.py and tests/stacks/test_rank_identity.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fake_proc import BASH, OTHER, USER, FakeProc

from resurrect.stacks.processes import job_rank_processes, this_node


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc.at(tmp_path)


def ranks(proc: FakeProc, job: str = "42", owner: int = USER, **kw: object) -> list[tuple]:
    found = job_rank_processes(job, owner_uid=owner, proc=proc.root, cgroup_root=proc.cgroups, **kw)  # type: ignore[arg-type]
    return [(p.rank, p.pid, p.node, p.rank_label) for p in found]


def test_torchrun_workers_are_the_ranks_not_the_agent_nor_their_loaders(proc: FakeProc) -> None:
    proc.step_daemon(10, "42", "0", node="node1")
    step = {"SLURM_JOB_ID": "42", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    proc.process(11, 10, env=step, cmdline="python3 -m torch.distributed.run train.py")
    for rank in (0, 1):
        worker = step | {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}
        proc.process(20 + rank, 11, env=worker)
        proc.process(30 + rank, 20 + rank, env=worker)  # its data-loader worker
    assert ranks(proc) == [(0, 20, "node1", "RANK"), (1, 21, "node1", "RANK")]


def test_a_launcher_is_no_rank_even_before_its_workers_start(proc: FakeProc) -> None:
    proc.step_daemon(10, "42", "0", node="node1")
    step = {"SLURM_JOB_ID": "42", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    proc.process(11, 10, env=step, cmdline="/usr/bin/python3 -m torch.distributed.run t.py")
    proc.process(12, 10, env=step, comm="orted", exe="/usr/bin/orted", cmdline="orted -mca x")
    proc.process(13, 10, env=step, cmdline="/venv/bin/python3 /venv/bin/deepspeed train.py")
    assert ranks(proc) == []


def test_srun_python_ranks_are_the_tasks_and_not_the_batch_script(proc: FakeProc) -> None:
    proc.step_daemon(10, "42", "batch", node="node1")
    batch = {"SLURM_JOB_ID": "42", "SLURM_PROCID": "0"}
    proc.process(11, 10, comm="bash", exe=BASH, env=batch)
    proc.process(12, 11, comm="srun", exe="/usr/bin/srun", env=batch)
    proc.step_daemon(13, "42", "0", node="node1")
    proc.step_daemon(14, "42", "0", node="node2")
    for rank, daemon in ((0, 13), (1, 14)):
        env = {"SLURM_JOB_ID": "42", "SLURM_PROCID": str(rank), "SLURM_NTASKS": "2"}
        proc.process(20 + rank, daemon, env=env)
    assert ranks(proc) == [(0, 20, "node1", "SLURM_PROCID"), (1, 21, "node2", "SLURM_PROCID")]
    [one] = job_rank_processes("42", owner_uid=USER, proc=proc.root, cgroup_root=proc.cgroups)[:1]
    assert one.world_size == 2


def test_a_shell_that_did_not_exec_is_not_the_rank_its_python_is(proc: FakeProc) -> None:
    proc.step_daemon(10, "42", "0", node="node1")
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4"}
    proc.process(11, 10, comm="bash", exe=BASH, env=env, cmdline="bash -c python3 train.py")
    proc.process(12, 11, env=env)
    proc.process(13, 12, env=env)  # a forked helper of the rank
    assert ranks(proc) == [(3, 12, "node1", "SLURM_PROCID")]


@pytest.mark.parametrize(
    ("label", "extra"),
    [
        ("OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE": "2", "PMIX_RANK": "{r}"}),
        ("PMIX_RANK", {}),
        ("PMI_RANK", {"PMI_SIZE": "2"}),
    ],
)
def test_mpi_ranks_are_found_by_their_launchers_variable(
    proc: FakeProc, label: str, extra: dict[str, str]
) -> None:
    """mpirun: the batch script runs mpirun, which starts one orted per node in step 0
    (``SLURM_PROCID`` = the node), which starts the ranks; ``srun --mpi=pmix|pmi2``: the
    tasks carry PMIX_RANK / PMI_RANK."""
    proc.step_daemon(10, "42", "0", node="node1")
    proc.process(11, 10, comm="orted", exe="/usr/bin/orted", env={"SLURM_PROCID": "0"})
    for r in (0, 1):
        env = {"SLURM_PROCID": "0", label: str(r)} | {k: v.format(r=r) for k, v in extra.items()}
        proc.process(20 + r, 11, env=env)
    assert ranks(proc) == [(0, 20, "node1", label), (1, 21, "node1", label)]


def test_an_impostor_of_another_user_with_the_jobs_environment_is_no_rank(proc: FakeProc) -> None:
    proc.step_daemon(10, "42", "0", node="node1")
    proc.process(20, 10, env={"RANK": "0", "SLURM_JOB_ID": "42"})
    lie = {"RANK": "1", "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "node9", "WORLD_SIZE": "2"}
    proc.process(21, 1, uid=OTHER, env=lie, state="T")  # outside every step
    assert ranks(proc) == [(0, 20, "node1", "RANK")]
    assert ranks(proc, owner=OTHER) == []  # and not the job's owner either


def test_a_step_daemon_must_be_roots_and_titled_by_slurm(proc: FakeProc) -> None:
    proc.step_daemon(10, "42", "0", uid=USER)  # a user's process named slurmstepd
    proc.process(20, 10, env={"RANK": "0"})
    proc.process(11, 1, comm="slurmstepd", uid=0, cmdline="slurmstepd -h")
    proc.process(21, 11, env={"RANK": "1"})
    assert ranks(proc) == []


def test_a_job_of_another_owner_in_the_same_step_tree_is_not_taken(proc: FakeProc) -> None:
    proc.step_daemon(10, "42", "0", node="node1")
    proc.process(20, 10, uid=OTHER, env={"RANK": "0"})
    assert ranks(proc) == [] and ranks(proc, owner=OTHER) == [(0, 20, "node1", "RANK")]
    assert job_rank_processes("42", owner_uid=None, proc=proc.root) == []  # owner unknown


def test_the_probe_names_ranks_after_its_own_node(proc: FakeProc) -> None:
    proc.step_daemon(10, "42", "0", node="node1")
    proc.step_daemon(11, "42", "0", node="node2")
    proc.step_daemon(12, "42", "0")  # no socket seen: one node per machine
    for rank, daemon in ((0, 10), (1, 11), (2, 12)):
        proc.process(20 + rank, daemon, env={"RANK": str(rank), "SLURMD_NODENAME": "node7"})
    assert ranks(proc, node="node2") == [(1, 21, "node2", "RANK"), (2, 22, "node2", "RANK")]


@pytest.mark.parametrize(
    "path",
    [
        "/slurm/uid_1001/job_42/step_0/task_0",  # cgroup v1
        "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0",  # cgroup v2
    ],
)
def test_proctrack_cgroup_places_a_process_in_its_job(proc: FakeProc, path: str) -> None:
    v2 = path.startswith("/system.slice")
    proc.cgroup_dir(("" if v2 else "freezer") + path)
    line = f"0::{path}\n" if v2 else f"4:freezer:{path}\n"
    proc.process(20, 1, env={"RANK": "0"}, cgroup=line)  # its step daemon is not its parent
    assert ranks(proc, node="gpu3") == [(0, 20, "gpu3", "RANK")]


def test_a_cgroup_a_user_made_with_a_jobs_name_is_not_that_job(proc: FakeProc) -> None:
    """systemd delegates a user's own subtree: they may name a directory job_42/step_0."""
    fake = "/user.slice/user-1001.slice/user@1001.service/job_42/step_0"
    proc.cgroup_dir(fake)
    proc.cgroup_dir(fake.rsplit("/", 2)[0] + "/job_42", owner=USER)
    proc.process(20, 1, env={"RANK": "0"}, cgroup=f"0::{fake}\n")
    # nested inside a real job's step, the outer (real) job counts
    real = "/system.slice/slurmstepd.scope/job_7/step_0/user/job_42/step_0"
    proc.cgroup_dir(real)
    proc.process(21, 1, env={"RANK": "1"}, cgroup=f"0::{real}\n")
    assert ranks(proc) == []
    assert ranks(proc, job="7") == [(1, 21, this_node(), "RANK")]


def test_cgroup_and_ancestry_that_disagree_place_a_process_nowhere(proc: FakeProc) -> None:
    path = "/system.slice/slurmstepd.scope/job_7/step_0"
    proc.cgroup_dir(path)
    proc.step_daemon(10, "42", "0", node="node1")
    proc.process(20, 10, env={"RANK": "0"}, cgroup=f"0::{path}\n")
    assert ranks(proc) == [] and ranks(proc, job="7") == []


def test_two_clusters_on_one_machine_keep_their_jobs_apart(proc: FakeProc) -> None:
    """Test machines run several clusters, each with a job 42 of the same user: the step
    daemon's SLURM_CONF (its slurmd's, in root's environment) tells them apart."""
    proc.step_daemon(10, "42", "0", node="node1", slurm_conf="/a/slurm.conf")
    proc.process(20, 10, env={"SLURM_PROCID": "0"})
    proc.step_daemon(11, "42", "0", node="node1", slurm_conf="/b/slurm.conf")
    proc.process(21, 11, env={"SLURM_PROCID": "0", "RANK": "0"})  # torchrun-shaped
    both = job_rank_processes("42", owner_uid=USER, proc=proc.root, cgroup_root=proc.cgroups)
    assert sorted((p.pid, p.rank_label) for p in both) == [(20, "SLURM_PROCID"), (21, "RANK")]
    [a] = job_rank_processes(
        "42", owner_uid=USER, slurm_conf="/a/slurm.conf", proc=proc.root, cgroup_root=proc.cgroups
    )
    assert a.pid == 20
    # a cluster whose slurmd runs without SLURM_CONF: its daemons name none
    proc.step_daemon(12, "43", "0", node="node2")
    proc.process(22, 12, env={"SLURM_PROCID": "1"})
    [plain] = job_rank_processes(
        "43", owner_uid=USER, slurm_conf="/etc/slurm/slurm.conf", proc=proc.root,
        cgroup_root=proc.cgroups,
    )  # fmt: skip
    assert plain.pid == 22


def test_every_process_of_a_job_is_found_ranks_or_not_and_never_its_step_daemons(
    proc: FakeProc,
) -> None:
    """What a fence kills: the batch script, srun, a launcher, the ranks and their children
    (data loaders, a checkpoint writer) of the job, by the kernel's word; not its step
    daemons (root's), not another job's processes, not a process that only claims the job."""
    from resurrect.stacks.processes import scan_job_processes

    proc.step_daemon(10, "42", "batch", node="node1")
    batch = {"SLURM_JOB_ID": "42", "SLURM_PROCID": "0", "SLURM_RESTART_COUNT": "2"}
    proc.process(11, 10, comm="bash", exe=BASH, env=batch)
    proc.process(12, 11, comm="srun", exe="/usr/bin/srun", env=batch)
    proc.step_daemon(13, "42", "0", node="node1")
    step = {"SLURM_JOB_ID": "42", "SLURM_PROCID": "0", "SLURM_RESTART_COUNT": "2"}
    proc.process(14, 13, env=step, cmdline="python3 -m torch.distributed.run train.py")
    worker = step | {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    proc.process(15, 14, env=worker)
    proc.process(16, 15, env=worker)  # its data loader, or a checkpoint writer
    proc.step_daemon(20, "43", "0", node="node1")
    proc.process(21, 20, env={"SLURM_JOB_ID": "43", "SLURM_PROCID": "0"})
    proc.process(30, 1, env=worker)  # claims job 42 in its environment only
    found = {
        (r.job_id, r.restart_count, r.process.pid, r.step_node)
        for r in scan_job_processes(proc.root, proc.cgroups)
    }
    assert found == {
        ("42", "2", 11, "node1"),
        ("42", "2", 12, "node1"),
        ("42", "2", 14, "node1"),
        ("42", "2", 15, "node1"),
        ("42", "2", 16, "node1"),
        ("43", "0", 21, "node1"),
    }
