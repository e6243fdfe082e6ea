"""Whatever started a job's ranks, a stopped rank is named, on the real local cluster.

Each shape runs a real 2-node torch.distributed (gloo) job: ``srun python`` (one task per
rank, ``SLURM_PROCID``, no ``RANK``: the Megatron/NeMo/Lightning way), ``srun --mpi=pmi2``
(``PMI_RANK``, as MPICH-style MPI sees it), torchrun (``RANK``) and a Python launcher that
spawns its workers with ``RANK``/``LOCAL_RANK`` (how the DeepSpeed and Accelerate launchers
start them). One rank is SIGSTOPped; each node is probed as its agent probes it
(:func:`resurrect.stacks.probe.probe_here` with the agent's own node name), the stacks are
joined and judged: the stopped rank on its node is the culprit. For ``srun python`` the
whole path runs too: the service, each node's agent, the recovery naming the culprit.

Not run here: ``mpirun``/Open MPI (``OMPI_COMM_WORLD_RANK``) and ``srun --mpi=pmix``
(``PMIX_RANK``): Open MPI is not installed and Slurm's PMIx plugin finds no PMIx library on
this machine; those shapes are covered over constructed /proc trees
(tests/stacks/test_processes.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import pwd
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from support.agents import node_agents, workflow_started
from support.requirements import missing
from support.service import ServiceConfigFor, running_service
from temporalio.client import Client

from resurrect.contracts import Interruption, SignalKind
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.local_cluster import (
    LocalSlurm,
    free_port_block,
    rendezvous_port_base,
    repo_root,
)
from resurrect.stacks.classify import RankStack, judge
from resurrect.stacks.probe import StackProbeRequest, probe_here
from resurrect.stacks.processes import job_rank_processes
from resurrect.stacks.pyspy import pyspy_binary

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

# A rank whatever launched it: its number from the launcher's variable.
PROGRAM = """
import datetime, os, sys, time, torch, torch.distributed as dist
LABELS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
rank = int(next(os.environ[k] for k in LABELS if k in os.environ))
world = int(os.environ.get("WORLD_SIZE") or os.environ.get("PMI_SIZE") or os.environ["SLURM_NTASKS"])
init = "env://" if "MASTER_ADDR" in os.environ else f"tcp://127.0.0.1:{sys.argv[1]}"
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                        timeout=datetime.timedelta(minutes=10))
t = torch.ones(4)
step = 0
while True:
    step += 1
    dist.all_reduce(t)
    if step == 5:
        print(f"ready rank {rank}", flush=True)
    time.sleep(0.05)
"""
# A launcher that starts one worker per node with RANK/LOCAL_RANK/WORLD_SIZE set, as
# deepspeed.launcher.launch and accelerate's launchers do.
LAUNCHER = """
import os, subprocess, sys
node, nodes = int(os.environ["SLURM_NODEID"]), int(os.environ["SLURM_NNODES"])
env = dict(os.environ, RANK=str(node), LOCAL_RANK="0", WORLD_SIZE=str(nodes),
           MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
sys.exit(subprocess.call([sys.executable, sys.argv[1], sys.argv[2]], env=env))
"""


@pytest.fixture(scope="module")
def programs(local_slurm: LocalSlurm) -> Path:
    if importlib.util.find_spec("torch") is None:
        missing("torch is not installed")
    if pyspy_binary() is None:
        missing("py-spy is not installed")
    folder = local_slurm.out_dir / "launchers"
    folder.mkdir(exist_ok=True)
    (folder / "rank.py").write_text(PROGRAM)
    (folder / "launch.py").write_text(LAUNCHER)
    for path in (folder, folder / "rank.py", folder / "launch.py"):
        path.chmod(0o755)
    return folder


def batch_script(shape: str, folder: Path, port: int) -> str:
    py, rank = sys.executable, folder / "rank.py"
    srun = "srun --ntasks-per-node=1 --kill-on-bad-exit=1"
    steps = {
        "srun": f"{srun} {py} {rank} {port}",
        "pmi2": f"{srun} --mpi=pmi2 {py} {rank} {port}",
        "torchrun": f"{srun} bash -c 'exec {py} -m torch.distributed.run --nnodes=2"
        f" --nproc_per_node=1 --node_rank=$SLURM_NODEID --master_addr=127.0.0.1"
        f" --master_port={port} {rank}'",
        "python-launcher": f"{srun} {py} {folder / 'launch.py'} {rank} {port}",
    }
    return f"#!/bin/bash\n{steps[shape]}\n"


def ready(out: Path, count: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if out.exists() and out.read_text(errors="replace").count("ready rank") >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"the job's ranks did not start: {out.read_text(errors='replace')}")


def probe_every_node(job_id: str, owner: int, nodes: list[str], conf: str) -> list[RankStack]:
    """What the follower joins: each node's agent's answer, that node's ranks."""
    stacks: list[RankStack] = []
    for node in nodes:
        request = StackProbeRequest(
            cluster="c",
            node=node,
            job_id=job_id,
            owner_uid=owner,
            slurm_conf=conf,
            ras=False,
            gpus=False,
        )
        stacks.extend(probe_here(request, here=node).stacks())
    return stacks


@pytest.mark.parametrize("shape", ["srun", "pmi2", "torchrun", "python-launcher"])
def test_a_stopped_rank_is_named_whatever_launched_it(
    cluster: LocalSlurm, programs: Path, shape: str
) -> None:
    port = free_port_block(1)
    out = cluster.out_dir / f"launcher-{shape}-{port}.out"
    job_id = cluster.submit(batch_script(shape, programs, port), nodes=2, output=str(out))
    owner = pwd.getpwnam(cluster.demo_user).pw_uid
    try:
        ready(out, 2)
        nodes = cluster.run(["scontrol", "show", "hostnames", cluster.job(job_id)["NodeList"]])
        nodes = nodes.split()
        found = job_rank_processes(job_id, owner_uid=owner, slurm_conf=cluster.slurm_conf)
        assert sorted(p.rank for p in found) == [0, 1], found  # one process per rank
        [stopped] = job_rank_processes(
            job_id, owner_uid=owner, node=nodes[-1], slurm_conf=cluster.slurm_conf
        )
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 60
            while True:  # until the peer is seen blocked in its next all_reduce
                verdict = judge(probe_every_node(job_id, owner, nodes, cluster.slurm_conf))
                if verdict.culprits or time.monotonic() > deadline:
                    break
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        assert [(c.rank, c.node) for c in verdict.culprits] == [(stopped.rank, nodes[-1])]
        assert [(v.rank, v.node) for v in verdict.victims] == [(1 - stopped.rank, nodes[0])]
    finally:
        cluster.run(["scancel", job_id], check=False)


@pytest.mark.temporal
async def test_a_stalled_rank_of_a_job_launched_by_srun_is_named_by_the_service(
    cluster: LocalSlurm,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
) -> None:
    """The whole path for ``srun python train.py`` (examples/train/train-srun.sbatch, no
    torchrun, no RANK): the service follows the job (``stack_probes: agents``), a rank is
    SIGSTOPped mid-training, each node's agent finds its rank as a task of the job's step,
    and the recovery starts with the stopped rank named as the culprit."""
    if importlib.util.find_spec("torch") is None:
        missing("torch is not installed")
    config = cluster_config(watcher={"stack_probes": "agents"})
    scheduler = cluster.scheduler()
    root = repo_root()
    ckpt = cluster.out_dir / f"ckpt-srun-{int(time.time() * 1000)}"
    ckpt.mkdir(parents=True)
    shutil.chown(ckpt, user=cluster.demo_user)
    owner = pwd.getpwnam(cluster.demo_user).pw_uid
    async with (
        node_agents(temporal_client, cluster.cluster_name, cluster.nodes),
        running_service(config, temporal_client, scheduler),
    ):
        job_id = cluster.submit(
            (root / "examples" / "train" / "train-srun.sbatch").read_text(),
            comment=json.dumps({"resurrect": {"checkpoint_dir": str(ckpt)}}),
            nodes=2,
            name="srun-direct",
            extra_args=[
                f"--export=ALL,RESURRECT_PYTHON={sys.executable},"
                f"RESURRECT_TRAIN_DIR={root / 'examples' / 'train'},CKPT_DIR={ckpt},"
                f"RESURRECT_MASTER_PORT_BASE={rendezvous_port_base()},RESURRECT_TRAIN_STEPS=3000,"
                "RESURRECT_TRAIN_CKPT_EVERY=50,RESURRECT_TRAIN_SLEEP=0.1"
            ],
        )
        deadline = time.monotonic() + 180
        while not any(ckpt.glob("step_*")):  # started, trained, saved: a rhythm of steps
            assert time.monotonic() < deadline, "the job did not save a checkpoint"
            await asyncio.sleep(0.2)
        job = await scheduler.get_job(job_id)
        victim = job.nodes[-1]
        [rank] = job_rank_processes(
            job_id, owner_uid=owner, node=victim, slurm_conf=cluster.slurm_conf
        )
        assert rank.rank_label == "SLURM_PROCID"
        os.kill(rank.pid, signal.SIGSTOP)
        try:
            workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, 0)
            await workflow_started(temporal_client, workflow_id, timeout=120)
        finally:
            os.kill(rank.pid, signal.SIGCONT)
        history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
        started_event = history.events[0].workflow_execution_started_event_attributes
        converter = temporal_client.data_converter
        [report] = await converter.decode(started_event.input.payloads, [Interruption])
        await asyncio.to_thread(cluster.run, ["scancel", job_id], check=False)
    culprit = next(e for e in report.evidence if e.role == "root")
    assert culprit.kind is SignalKind.STACK_DUMP
    assert (culprit.rank, culprit.host, culprit.fields["state"]) == (rank.rank, victim, "T")
