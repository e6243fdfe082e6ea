"""Agent-side stack dumps on the real local cluster: a 2-node torchrun job (gloo) whose rank on
node2 is SIGSTOPped; the service runs with ``watcher.stack_probes: agents``, so on suspicion
the follower asks each node's agent (a StackProbeWorkflow on the node's own task queue,
answered by the agent's probe worker running py-spy as root) and the culprit's stack reaches
the recovery's evidence. The agents' probe workers run in this process, one per node, as
``resurrect agent run`` runs them (sensors/node_agent/stack_probe.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from support.service import running_service, service_config
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from resurrect.contracts import Interruption, SignalKind, recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm, repo_root
from resurrect.sensors.node_agent.stack_probe import serve_probes
from resurrect.stacks.probe import STACK_PROBE_WORKFLOW
from resurrect.stacks.processes import job_rank_processes
from resurrect.temporal.server import EmbeddedTemporal

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.torch]

STEP_S = 0.1


@pytest.fixture
def cluster(local_slurm: LocalSlurm) -> Iterator[LocalSlurm]:
    local_slurm.reset()
    yield local_slurm
    local_slurm.reset()


@contextlib.asynccontextmanager
async def node_agents(client: Client, cluster: str, nodes: list[str]) -> AsyncIterator[None]:
    """Each node's agent probe worker (what `resurrect agent run` starts beside its watch)."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(serve_probes(client, cluster, node, stop)) for node in nodes]
    try:
        await asyncio.sleep(0.5)
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


async def rank_on(job_id: str, node: str, timeout: float = 120) -> tuple[int, int]:
    """(rank, pid) of the job's rank on ``node`` once it has trained a few steps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in job_rank_processes(job_id):
            if process.node == node and process.rank is not None:
                return process.rank, process.pid
        await asyncio.sleep(0.5)
    raise AssertionError(f"no rank of job {job_id} on {node}")


async def started(client: Client, workflow_id: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(workflow_id).describe()
            return time.time()
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} did not start within {timeout} s")


async def test_a_stalled_ranks_stack_comes_from_its_nodes_agent(
    cluster: LocalSlurm,
    temporal_server: EmbeddedTemporal,
    temporal_client: Client,
    tmp_path: Path,
) -> None:
    root = repo_root()
    ckpt = cluster.out_dir / f"ckpt-agent-probe-{int(time.time() * 1000)}"
    ckpt.mkdir(parents=True)
    shutil.chown(ckpt, user=cluster.demo_user)
    config = service_config(
        tmp_path,
        cluster.cluster_name,
        cluster.slurm_conf,
        temporal_server.address,
        watcher={"stack_probes": "agents"},
    )
    scheduler = cluster.scheduler()
    async with (
        node_agents(temporal_client, cluster.cluster_name, cluster.nodes),
        running_service(config, temporal_client, scheduler),
    ):
        job_id = cluster.submit(
            (root / "examples" / "train" / "train.sbatch").read_text(),
            comment=json.dumps({"resurrect": {"checkpoint_dir": str(ckpt)}}),
            nodes=2,
            name="agent-probe",
            extra_args=[
                f"--export=ALL,RESURRECT_PYTHON={sys.executable},"
                f"RESURRECT_TRAIN_DIR={root / 'examples' / 'train'},CKPT_DIR={ckpt},"
                f"RESURRECT_TRAIN_STEPS=3000,RESURRECT_TRAIN_CKPT_EVERY=50,"
                f"RESURRECT_TRAIN_SLEEP={STEP_S}"
            ],
        )
        job = await scheduler.get_job(job_id)
        for _ in range(240):
            if len(job.nodes) == 2:
                break
            await asyncio.sleep(0.5)
            job = await scheduler.get_job(job_id)
        victim = job.nodes[-1]
        rank, pid = await rank_on(job_id, victim)
        await asyncio.sleep(8)  # a rhythm of steps for the adaptive allowance
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.time()
        try:
            workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, 0)
            detected_at = await started(temporal_client, workflow_id, timeout=120)
        finally:
            os.kill(pid, signal.SIGCONT)
        handle = temporal_client.get_workflow_handle(workflow_id)
        history = await handle.fetch_history()
        started_event = history.events[0].workflow_execution_started_event_attributes
        converter = temporal_client.data_converter
        [report] = await converter.decode(started_event.input.payloads, [Interruption])
        await asyncio.to_thread(cluster.run, ["scancel", job_id], check=False)

    culprit = next(e for e in report.evidence if e.role == "root")
    assert culprit.kind is SignalKind.STACK_DUMP
    assert (culprit.rank, culprit.host, culprit.fields["state"]) == (rank, victim, "T")
    assert "culprit: rank" in culprit.text
    victims = [e for e in report.evidence if e.rule == "stacks.collective"]
    assert victims and all(e.host != victim for e in victims)
    # NCCL RAS was asked on the node: a gloo job has none, and the evidence says so
    ras = [e for e in report.evidence if (e.rule or "").startswith("nccl_ras.")]
    assert ras and all(e.rule == "nccl_ras.unavailable" for e in ras)
    # each node's agent answered a probe; the stacks are in those workflows' histories
    prefix = f"stack-probe/{cluster.cluster_name}/{job_id}/"
    probes = [
        w
        async for w in temporal_client.list_workflows(f"WorkflowType = '{STACK_PROBE_WORKFLOW}'")
        if w.id.startswith(prefix)
    ]
    assert {w.task_queue for w in probes} >= {
        f"resurrect-agent/{cluster.cluster_name}/{n}" for n in job.nodes
    }
    assert all(w.status is WorkflowExecutionStatus.COMPLETED for w in probes)
    detect_s = detected_at - stopped_at
    print(f"\nagent stack probe: rank {rank} on {victim} named {detect_s:.1f} s after the stop")
    assert detect_s < 3 * STEP_S + 10 + 5  # target 3 x step + 10 s; probes add a round trip
