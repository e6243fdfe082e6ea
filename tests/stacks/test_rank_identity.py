"""Issue 20, item 2: rank processes were found by their environment alone. A process of
another user on a shared node, its environment saying ``SLURM_JOB_ID=<victim>`` and
``RANK=1`` and SIGSTOPped, turned the victim's quiet spell into a confirmed hang (cancelled
and restarted on its own budget), named a node the victim never used (``SLURMD_NODENAME``)
and could feed the victim's Flight Recorder records and GPU bindings.

Now a process is a rank of job N only if the kernel puts it in N's steps (its cgroup, or
descent from N's root-owned ``slurmstepd``) and its uid is N's owner (Slurm's); its node is
the node the probe runs on. Real Slurm (deploy/local-slurm), real processes, real py-spy.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.requirements import missing

from resurrect.demo.local_cluster import LocalSlurm
from resurrect.stacks.classify import RankStack, judge
from resurrect.stacks.collect import LocalRanks
from resurrect.stacks.probe import StackProbeRequest, probe_here
from resurrect.stacks.processes import job_rank_processes
from resurrect.stacks.pyspy import pyspy_binary
from resurrect.stacks.slurm_job import job_gpus, job_owner_uid

pytestmark = [pytest.mark.slurm]

LOOP = "import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(0.05)\n"


def impostor(user: str, victim: str, script: Path) -> subprocess.Popen[bytes]:
    """A process of ``user`` outside every Slurm step whose environment claims to be rank 1
    of ``victim`` on a node the victim never used, as the issue's attacker started it."""
    lie = {
        "PATH": "/usr/bin:/bin",
        "SLURM_JOB_ID": victim,
        "RANK": "1",
        "WORLD_SIZE": "2",
        "SLURM_PROCID": "1",
        "SLURMD_NODENAME": "node9",
        "SLURM_RESTART_COUNT": "0",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/tmp/forged_trace_",
        "CUDA_VISIBLE_DEVICES": "6",
    }
    argv = ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in lie.items())]
    return subprocess.Popen([*argv, sys.executable, str(script)], stdout=subprocess.PIPE)


def stopped_child(launcher: subprocess.Popen[bytes]) -> int:
    """The impostor's Python (runuser's child, or runuser itself once it exec'd), stopped."""
    assert launcher.stdout is not None
    assert launcher.stdout.readline().strip() == b"up"
    found = subprocess.run(
        ["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    pid = int(found[0]) if found else launcher.pid
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_an_impostor_with_the_victims_environment_is_not_its_rank(
    cluster: LocalSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pyspy_binary() is None:
        missing("py-spy is not installed")
    script = cluster.out_dir / "identity-loop.py"
    script.write_text(LOOP)
    script.chmod(0o644)
    victim = cluster.submit(
        f"#!/bin/bash\nsrun --ntasks-per-node=1 {sys.executable} {script}\n", nodes=2
    )
    owner, conf = pwd.getpwnam(cluster.demo_user).pw_uid, cluster.slurm_conf
    deadline = time.monotonic() + 60
    while len(job_rank_processes(victim, owner_uid=owner, slurm_conf=conf)) < 2:
        assert time.monotonic() < deadline, "the victim's ranks did not start"
        time.sleep(0.2)
    real = {p.pid for p in job_rank_processes(victim, owner_uid=owner, slurm_conf=conf)}
    # what the agent asks Slurm when the follower did not say: the owner, the GPUs (none)
    monkeypatch.setenv("SLURM_CONF", cluster.slurm_conf)
    assert (job_owner_uid(victim), job_gpus(victim)) == (owner, {})
    others = [impostor("nobody", victim, script), impostor(cluster.demo_user, victim, script)]
    try:
        stopped = {stopped_child(p) for p in others}  # the attack: stopped "rank 1"s
        nodes = cluster.run(["scontrol", "show", "hostnames", cluster.job(victim)["NodeList"]])
        stacks: list[RankStack] = []
        for node in nodes.split():  # what each node's agent answers
            request = StackProbeRequest(
                cluster=cluster.cluster_name, node=node, job_id=victim, owner_uid=owner,
                slurm_conf=conf, ras=False, gpus=False,
            )  # fmt: skip
            stacks.extend(probe_here(request, here=node).stacks())
        local = LocalRanks(
            victim, 0, owner_uid=owner, slurm_conf=conf
        ).stacks()  # the follower's own look
    finally:
        for process in others:
            process.kill()
        for pid in stopped:
            os.kill(pid, signal.SIGKILL)
        cluster.run(["scancel", victim], check=False)
    for found in (stacks, local):
        assert {s.pid for s in found} == real and not stopped & {s.pid for s in found}
        assert {s.node for s in found} <= set(nodes.split()) and "node9" not in nodes
        assert all(s.state != "T" and not s.collectives for s in found)
        verdict = judge(found)
        assert verdict.culprits == []  # no hang to confirm: the victim is left alone
