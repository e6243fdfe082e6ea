"""Adaptive hang detection on the real local cluster: a checkpoint save that takes far longer
than a step (rank 0 flushing while its peer waits in the barrier, which is what a stall looks
like in the stacks) is not a hang; a rank stalled during a save is named within seconds, its
stack read by its node's agent. The
stalled-rank and straggler cases also run as demo scenarios (tests/e2e/test_demo_*.py)."""

from __future__ import annotations

import asyncio
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
from support.recovery import completed
from support.service import ServiceConfigFor, running_service
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from resurrect.contracts import Interruption, JobState, SignalKind
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm, repo_root
from resurrect.stacks.probe import STACK_PROBE_WORKFLOW
from resurrect.stacks.processes import job_rank_processes

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.torch]

STEP_S = 0.1  # the job's step time (its sleep; the model's compute is negligible)
SAVE_DELAY_S = 8.0  # 80 steps' time, past the 5 s floor and 3 x the progress interval


def submit_training(cluster: LocalSlurm, name: str, settings: str) -> tuple[str, Path]:
    """Submit the example training job on 2 nodes, opted in with a fresh checkpoint directory;
    ``settings``: its RESURRECT_TRAIN_* variables. Returns (job id, checkpoint directory)."""
    root = repo_root()
    ckpt = cluster.out_dir / f"ckpt-{name}-{int(time.time() * 1000)}"
    ckpt.mkdir(parents=True)
    shutil.chown(ckpt, user=cluster.demo_user)
    job_id = cluster.submit(
        (root / "examples" / "train" / "train.sbatch").read_text(),
        comment=json.dumps({"resurrect": {"checkpoint_dir": str(ckpt)}}),
        nodes=2,
        name=name,
        extra_args=[
            f"--export=ALL,RESURRECT_PYTHON={sys.executable},"
            f"RESURRECT_TRAIN_DIR={root / 'examples' / 'train'},CKPT_DIR={ckpt},{settings}"
        ],
    )
    return job_id, ckpt


async def test_a_save_far_longer_than_a_step_raises_no_false_hang(
    cluster: LocalSlurm,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
) -> None:
    config = cluster_config()
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler):
        job_id, ckpt = submit_training(
            cluster,
            "slow-save",
            f"RESURRECT_TRAIN_STEPS=60,RESURRECT_TRAIN_CKPT_EVERY=20,"
            f"RESURRECT_TRAIN_SLEEP={STEP_S},RESURRECT_TRAIN_SAVE_DELAY_S={SAVE_DELAY_S}",
        )
        job = await completed(scheduler, job_id, 240)
        assert job.state is JobState.COMPLETED, job
        assert job.restart_count == 0
        workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, 0)
        with pytest.raises(RPCError):
            await temporal_client.get_workflow_handle(workflow_id).describe()
    assert sorted(p.name for p in ckpt.glob("step_*")) == ["step_20", "step_40", "step_60"]


async def rank_on(
    job_id: str, node: str, owner: str, conf: str, timeout: float = 120
) -> tuple[int, int]:
    """(rank, pid) of the job's rank on ``node`` once it has trained a few steps."""
    deadline = time.monotonic() + timeout
    uid = pwd.getpwnam(owner).pw_uid
    while time.monotonic() < deadline:
        for process in job_rank_processes(job_id, owner_uid=uid, node=node, slurm_conf=conf):
            if process.rank is not None:
                return process.rank, process.pid
        await asyncio.sleep(0.5)
    raise AssertionError(f"no rank of job {job_id} on {node}")


async def first_checkpoint(ckpt: Path, settle_s: float, timeout: float = 180) -> None:
    """Wait until the first checkpoint's directory appears, then ``settle_s`` more."""
    deadline = time.monotonic() + timeout
    while not any(ckpt.glob("step_*")):
        assert time.monotonic() < deadline, f"no checkpoint in {ckpt} within {timeout} s"
        await asyncio.sleep(0.2)
    await asyncio.sleep(settle_s)


async def test_a_rank_stalled_in_a_save_is_named_from_its_nodes_agent_stack(
    cluster: LocalSlurm,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
) -> None:
    """A stalled rank's stack comes from its node's agent: the service runs with
    ``watcher.stack_probes: agents``; on suspicion the follower asks each node's agent (a
    StackProbeWorkflow on the node's own task queue, answered by the agent's probe worker
    running py-spy as root); the culprit's stack reaches the recovery's evidence. The
    agents' probe workers run in this process, one per node, as ``resurrect agent run``
    runs them (sensors/node_agent/stack_probe.py).

    The rank is stopped during a checkpoint save (rank 0 pauses 2 s in each save): a save
    may take ``checkpoint_s`` (900 s), but the early look after the train allowance sees
    the stopped rank its peer waits for, so the hang is named within seconds."""
    config = cluster_config(watcher={"stack_probes": "agents"})
    scheduler = cluster.scheduler()
    async with (
        node_agents(temporal_client, cluster.cluster_name, cluster.nodes),
        running_service(config, temporal_client, scheduler),
    ):
        job_id, ckpt = submit_training(
            cluster,
            "agent-probe",
            f"RESURRECT_TRAIN_STEPS=3000,RESURRECT_TRAIN_CKPT_EVERY=50,"
            f"RESURRECT_TRAIN_SLEEP={STEP_S},RESURRECT_TRAIN_SAVE_DELAY_S=2",
        )
        job = await scheduler.get_job(job_id)
        for _ in range(240):
            if len(job.nodes) == 2:
                break
            await asyncio.sleep(0.5)
            job = await scheduler.get_job(job_id)
        victim = job.nodes[-1]
        rank, pid = await rank_on(job_id, victim, cluster.demo_user, cluster.slurm_conf)
        await first_checkpoint(ckpt, settle_s=0.5)  # a rhythm of steps; the save is under way
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.time()
        try:
            workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, 0)
            detected_at = await workflow_started(temporal_client, workflow_id, timeout=120)
        finally:
            os.kill(pid, signal.SIGCONT)
        handle = temporal_client.get_workflow_handle(workflow_id)
        history = await handle.fetch_history()
        started_event = history.events[0].workflow_execution_started_event_attributes
        converter = temporal_client.data_converter
        [report] = await converter.decode(started_event.input.payloads, [Interruption])
        await asyncio.to_thread(cluster.run, ["scancel", job_id], check=False)

    assert "in phase checkpoint" in report.reason, report.reason  # stalled mid-save
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
