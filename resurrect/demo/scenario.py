"""The demo: a real local Slurm cluster, resurrect, a real training job, a fault, a recovery.

``run_demo`` starts everything on this machine (a 4-node Slurm cluster from
``deploy/local-slurm``, the embedded Temporal server with its web UI, the worker, the Slurm
watcher and the job-log follower), submits the example ``torchrun`` job on 2 nodes as an
unprivileged user with an opt-in comment, waits until it has written a checkpoint, injects
the scenario's fault, and follows the recovery to the end of training. It measures:

* ``time_to_detect_s``: fault injected -> recovery workflow started;
* ``time_to_recover_s``: recovery workflow started -> job running again (on healthy nodes);

and stops everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    JobInfo,
    JobState,
    RecoveryOutcome,
    SignalKind,
    recovery_workflow_id,
)
from resurrect.demo.local_cluster import LocalSlurm, repo_root, start_local_slurm, stop_local_slurm
from resurrect.goodput.accounting import lost_by_part
from resurrect.goodput.history import load_recoveries
from resurrect.goodput.model import JobGoodput
from resurrect.goodput.report import job_goodput
from resurrect.service import ServiceParts, run_service
from resurrect.stacks.processes import job_rank_processes
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal, free_port, port_open

Scenario = Literal["node-loss", "gpu-error", "checkpoint-damage", "hang", "straggler"]
SCENARIOS: tuple[Scenario, ...] = (
    "node-loss",
    "gpu-error",
    "checkpoint-damage",
    "hang",
    "straggler",
)
# The straggler scenario: one rank runs 1/4 of the time (SIGSTOP 150 ms, SIGCONT 50 ms), the
# job asks for a restart when it pays off, judged after 15 s of straggling, and is long
# enough (remaining steps) for a restart to pay off.
STRAGGLER_STOP_S, STRAGGLER_RUN_S = 0.15, 0.05
STRAGGLER_POLICY = {"straggler_duration_s": 15, "straggler_action": "restart"}
STRAGGLER_TRAIN_STEPS = 4000
# The uninterrupted run's final parameters sha per (python, repo, steps, checkpoint interval):
# training is deterministic, so one reference run per settings serves every demo this process
# runs (the test suite runs several).
_REFERENCE_SHAS: dict[tuple[str, str, int, int], str] = {}

Progress = Callable[[str], None]


@dataclass
class DemoSettings:
    scenario: Scenario = "node-loss"
    state_dir: Path = Path("/tmp/resurrect-demo")
    nodes: int = 4
    train_steps: int = 120
    ckpt_every: int = 20
    step_sleep_s: float = 0.1
    fault_after_step: int = 45
    ui_port: int = 8233
    timeout_s: float = 600.0
    reference_run: bool = True  # train once more uninterrupted and compare final params
    python: str = field(default_factory=lambda: sys.executable)
    # resurrect's backend: "cli", or "slurmrestd" (the cluster also runs slurmrestd)
    scheduler: str = "cli"


class DemoError(RuntimeError):
    pass


def _checkpoint_steps(ckpt_dir: Path) -> list[int]:
    steps = []
    for entry in ckpt_dir.glob("step_*"):
        if (entry / ".metadata").exists():
            with contextlib.suppress(ValueError):
                steps.append(int(entry.name.split("_", 1)[1]))
    return sorted(steps)


def _damage_newest_checkpoint(ckpt_dir: Path) -> str:
    """Truncate the largest shard of the newest complete checkpoint (a torn write)."""
    steps = _checkpoint_steps(ckpt_dir)
    if not steps:
        raise DemoError("no checkpoint to damage")
    newest = ckpt_dir / f"step_{steps[-1]}"
    shards = sorted(
        (p for p in newest.iterdir() if p.is_file() and p.suffix == ".distcp"),
        key=lambda p: p.stat().st_size,
    )
    if not shards:
        raise DemoError(f"{newest} has no shard files")
    victim = shards[-1]
    with open(victim, "r+b") as handle:
        handle.truncate(victim.stat().st_size // 2)
    return str(victim)


class Demo:
    """One demo run; ``await run()`` returns the result dict (also printed as JSON)."""

    def __init__(self, settings: DemoSettings, progress: Progress) -> None:
        self.settings = settings
        self.say = progress
        self.t0 = time.monotonic()
        self.cluster: LocalSlurm | None = None
        self.server: EmbeddedTemporal | None = None
        # gpu-error: one node agent per node, its GPUs simulated (fake NVML)
        self.simulated_gpus: dict[str, Any] = {}

    # ------------------------------------------------------------------ helpers
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    async def _job(self, job_id: str) -> JobInfo:
        assert self.cluster is not None
        return await self.cluster.scheduler().get_job(job_id)

    async def _wait_job(
        self, job_id: str, ok: Callable[[JobInfo], bool], timeout: float, what: str
    ) -> JobInfo:
        deadline = time.monotonic() + timeout
        last: JobInfo | None = None
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                last = await self._job(job_id)
                if ok(last):
                    return last
            await asyncio.sleep(0.2)
        raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}; last state: {last}")

    def _config(self, cluster: LocalSlurm, address: str) -> ResurrectConfig:
        rest = {}
        if self.settings.scheduler == "slurmrestd":
            rest = {
                "slurmrestd_url": f"unix:{cluster.restd['RESTD_SOCKET']}",
                "slurmrestd_token_file": cluster.restd["RESTD_TOKEN_FILE"],
            }
        return ResurrectConfig.model_validate(
            {
                "mode": "act",
                "cluster": {
                    "name": cluster.cluster_name,
                    "slurm_conf": cluster.slurm_conf,
                    # the cluster's own version's clients (RESURRECT_SLURM_VERSION)
                    "slurm_bin_dir": str(cluster.bin_dir),
                    "scheduler": self.settings.scheduler,
                    **rest,
                },
                "temporal": {
                    "embedded": False,
                    "address": address,
                    "state_dir": str(self.settings.state_dir / "resurrect"),
                },
                "watcher": {"poll_interval_s": 1.0, "log_poll_interval_s": 0.1},
                "recovery": {"wait_running_timeout_s": 300},
                # the operator's policy (a job's comment may only make it more conservative):
                # the straggler scenario acts on a slowed rank within seconds
                "policy": {
                    "default": {
                        "enabled": False,
                        **(
                            {"progress": STRAGGLER_POLICY}
                            if self.settings.scenario == "straggler"
                            else {}
                        ),
                    }
                },
            }
        )

    # ------------------------------------------------------------------ the run
    async def run(self) -> dict[str, Any]:
        s = self.settings
        root = repo_root()
        s.state_dir.mkdir(parents=True, exist_ok=True)
        # Job ids restart at 1 with every fresh demo cluster: recoveries of an earlier demo
        # in a kept Temporal database would share workflow ids with this one's.
        shutil.rmtree(s.state_dir / "temporal", ignore_errors=True)
        self.say(f"starting a {s.nodes}-node Slurm cluster (deploy/local-slurm/start.sh)")
        self.cluster = cluster = await asyncio.to_thread(
            start_local_slurm,
            nodes=s.nodes,
            cluster_name="demo",
            state_dir=s.state_dir / "slurm",
            restd=s.scheduler == "slurmrestd",
        )
        self.say(f"cluster up in {cluster.start_seconds:.1f} s: {', '.join(cluster.nodes)}")
        await asyncio.to_thread(self._check_job_user_can_train, root, cluster.demo_user)

        ui_port = s.ui_port if not port_open("127.0.0.1", s.ui_port) else free_port()
        self.server = EmbeddedTemporal(
            state_dir=s.state_dir / "temporal", port=free_port(), ui_port=ui_port
        )
        await asyncio.to_thread(self.server.start)
        self.say(f"Temporal dev server on {self.server.address}; web UI: {self.server.ui_url}")
        config = self._config(cluster, self.server.address)
        client = await connect(config.temporal, attempts=20)
        stop = asyncio.Event()
        # slurmrestd: the backend the configuration names, built as a site's service builds it
        scheduler = cluster.scheduler() if s.scheduler == "cli" else None
        service = asyncio.create_task(
            run_service(config, ServiceParts(), stop, client=client, scheduler=scheduler)
        )
        agents: list[asyncio.Task[None]] = []
        if s.scenario == "gpu-error":
            # A GPU that fails shows in its node's kernel log and NVML, not only in what the
            # job prints; resurrect drains a node only when such a second source agrees.
            agents = self._start_node_agents(cluster, client, config, stop)
            self.say(f"node agents running on {', '.join(cluster.nodes)} (simulated GPUs)")
        try:
            return await self._scenario(root, cluster, client, config)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(service, *agents), timeout=30)

    def _start_node_agents(
        self, cluster: LocalSlurm, client: Client, config: ResurrectConfig, stop: asyncio.Event
    ) -> list[asyncio.Task[None]]:
        from resurrect.config import AgentSettings
        from resurrect.rules import load_engine
        from resurrect.sensors.node_agent import FakeNvml, NodeAgent
        from resurrect.sensors.node_agent.reporters import TemporalReporter

        engine = load_engine(config.rules.extra_packs)
        tasks: list[asyncio.Task[None]] = []
        for node in cluster.nodes:
            settings = AgentSettings(node_name=node, kernel_log=False, interval_s=1.0)
            nvml = FakeNvml.with_gpus(2)
            reporter = TemporalReporter(
                client,
                cluster=config.cluster.name,
                task_queue=config.temporal.task_queue,
                settings=settings,
            )
            agent = NodeAgent(settings, nvml=nvml, engine=engine, reporter=reporter)
            self.simulated_gpus[node] = nvml
            tasks.append(asyncio.create_task(agent.run(stop), name=f"agent-{node}"))
        return tasks

    async def _scenario(
        self, root: Path, cluster: LocalSlurm, client: Client, config: ResurrectConfig
    ) -> dict[str, Any]:
        s = self.settings
        ckpt_dir = cluster.out_dir / f"ckpt-{s.scenario}-{int(time.time())}"
        ckpt_dir.mkdir(parents=True)
        shutil.chown(ckpt_dir, user=cluster.demo_user)
        section: dict[str, Any] = {"max_restarts": 2, "checkpoint_dir": str(ckpt_dir)}
        train_steps = s.train_steps
        if s.scenario == "straggler":
            train_steps = max(train_steps, STRAGGLER_TRAIN_STEPS)
        comment = json.dumps({"resurrect": section}, separators=(",", ":"))
        env_args = [
            f"--export=ALL,RESURRECT_PYTHON={s.python},"
            f"RESURRECT_TRAIN_DIR={root / 'examples' / 'train'},"
            f"CKPT_DIR={ckpt_dir},RESURRECT_TRAIN_STEPS={train_steps},"
            f"RESURRECT_TRAIN_CKPT_EVERY={s.ckpt_every},RESURRECT_TRAIN_SLEEP={s.step_sleep_s},"
            # local clusters on one host all number jobs from 1: each its own rendezvous ports
            f"RESURRECT_MASTER_PORT_BASE={random.SystemRandom().randrange(20000, 40000)}"
        ]
        if s.scenario == "gpu-error":
            env_args[0] += (
                f",RESURRECT_TRAIN_FAIL_GPU_AT_STEP={s.fault_after_step},RESURRECT_TRAIN_FAIL_GPU_RANK=1"
            )
        job_id = await asyncio.to_thread(
            cluster.submit,
            (root / "examples" / "train" / "train.sbatch").read_text(),
            comment=comment,
            nodes=2,
            name="resurrect-train",
            extra_args=env_args,
        )
        self.say(
            f"submitted job {job_id} as {cluster.demo_user}: 2 nodes, torchrun (gloo),"
            f" checkpoints in {ckpt_dir}"
        )
        job = await self._wait_job(
            job_id, lambda j: j.state is JobState.RUNNING, 120, "the job to run"
        )
        self.say(f"job {job_id} running on {', '.join(job.nodes)}")
        victim = job.nodes[-1]

        # let it train and checkpoint before the fault
        want = max(s.ckpt_every, (s.fault_after_step // s.ckpt_every) * s.ckpt_every)
        if s.scenario == "straggler":  # slowing down needs no checkpoint to fall back to
            want = s.ckpt_every
        deadline = time.monotonic() + 180
        while not [x for x in _checkpoint_steps(ckpt_dir) if x >= want]:
            if time.monotonic() > deadline:
                raise DemoError(f"job {job_id} wrote no checkpoint of step {want} in time")
            current = await self._job(job_id)
            if current.state is not JobState.RUNNING:
                raise DemoError(f"job {job_id} stopped before the fault: {current.state.value}")
            await asyncio.sleep(0.5)
        self.say(f"checkpoints so far: steps {_checkpoint_steps(ckpt_dir)}")

        damaged = None
        workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, 0)
        stopped_rank: int | None = None
        duty: asyncio.Task[None] | None = None
        if s.scenario == "straggler":
            stopped_rank, pid = await asyncio.to_thread(self._rank_on, job_id, victim)
            t_fault = time.time()
            duty = asyncio.create_task(_duty_cycle(pid))
            self.say(
                f"FAULT: rank {stopped_rank} (pid {pid}) on {victim} slowed: runs"
                f" {STRAGGLER_RUN_S * 1000:.0f} ms of every"
                f" {(STRAGGLER_RUN_S + STRAGGLER_STOP_S) * 1000:.0f} ms (SIGSTOP/SIGCONT)"
            )
        elif s.scenario == "hang":
            # stop one rank between two saves: its peers block in gloo (a real stall)
            await self._wait_step_line_after(job_id, max(_checkpoint_steps(ckpt_dir)))
            stopped_rank, pid = await asyncio.to_thread(self._rank_on, job_id, victim)
            t_fault = time.time()
            os.kill(pid, signal.SIGSTOP)
            self.say(f"FAULT: stopped rank {stopped_rank} (pid {pid}) on {victim} with SIGSTOP")
        elif s.scenario == "gpu-error":
            self.say(
                f"rank 1 on {victim} will report a fatal GPU error at step {s.fault_after_step}"
            )
            t_fault = await self._wait_fault_line(job_id)
            # the same failure, as the victim's own NVML reports it: a double-bit ECC Xid
            self.simulated_gpus[victim].emit_xid(gpu=0, xid=48)
            self.say(f"NVML on {victim}: Xid 48 (double-bit ECC error) on GPU 0")
        else:
            if s.scenario == "checkpoint-damage":
                # the newest checkpoint is torn by the crash: resurrect must fall back
                damaged = _damage_newest_checkpoint(ckpt_dir)
                self.say(f"damaged the newest checkpoint: truncated {damaged}")
            t_fault = time.time()
            await asyncio.to_thread(cluster.kill_node, victim)
            self.say(f"FAULT: killed node {victim} (its slurmd and every process of the job on it)")

        try:
            t_detect = await self._wait_workflow_started(client, workflow_id, timeout=120)
        finally:
            if duty is not None:
                duty.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await duty
        self.say(f"recovery {workflow_id} started {t_detect - t_fault:.1f} s after the fault")
        self.say(
            f"watch it: {self.server.ui_url if self.server else ''}"
            f"/namespaces/default/workflows/{workflow_id}"
        )

        # a hang or a straggler without hardware evidence restarts in place
        moves_away = s.scenario not in ("hang", "straggler")
        running = await self._wait_job(
            job_id,
            lambda j: (
                j.state is JobState.RUNNING
                and j.restart_count > 0
                and not (moves_away and victim in j.nodes)
            ),
            s.timeout_s,
            "the job to run again on healthy nodes",
        )
        t_running = time.time()
        self.say(
            f"job {job_id} running again on {', '.join(running.nodes)}"
            f" (restart {running.restart_count})"
        )
        handle = client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)
        outcome: RecoveryOutcome = await asyncio.wait_for(handle.result(), timeout=s.timeout_s)
        self.say(
            f"recovery outcome: {outcome.outcome}; fault {outcome.fault_class.value};"
            f" drained {outcome.drained_nodes}"
        )
        for note in outcome.notes:
            self.say(f"  note: {note}")

        if s.scenario == "straggler":  # the point is made; the long job need not finish
            await asyncio.to_thread(cluster.run, ["scancel", job_id], check=False)
        final = await self._wait_job(
            job_id,
            lambda j: j.state not in (JobState.RUNNING, JobState.PENDING, JobState.COMPLETING),
            s.timeout_s,
            "training to finish",
        )
        completed = final.state is JobState.COMPLETED
        self.say(f"job {job_id} finished: {final.state.value}")
        cost = await self._goodput(client, cluster, job_id)
        checkpoint = outcome.checkpoint
        final_sha = _read_text(ckpt_dir / "final.sha256")
        reference_sha = None
        if s.reference_run and completed:
            key = self._reference_key(root)
            reference_sha = _REFERENCE_SHAS.get(key)
            if reference_sha is not None:
                self.say("comparing with this process' earlier uninterrupted run of the same")
            else:
                self.say("running the same training uninterrupted (torchrun --standalone)")
                reference_sha = await asyncio.to_thread(self._reference_sha, root, cluster.out_dir)
                if reference_sha is not None:  # training is deterministic: once per settings
                    _REFERENCE_SHAS[key] = reference_sha
            self.say(
                "final parameters "
                + ("EQUAL to" if final_sha == reference_sha else "DIFFERENT from")
                + " the uninterrupted run's"
            )
        culprit_rank, culprit_node = _culprit(outcome)
        return {
            "scenario": s.scenario,
            "scheduler": s.scheduler,
            "action": outcome.action.value,
            "culprit_rank": culprit_rank,
            "culprit_node": culprit_node,
            "stopped_rank": stopped_rank,
            "recovery_notes": outcome.notes,
            "recovered": outcome.recovered,
            "fault_class": outcome.fault_class.value,
            "injected_node": victim,
            "drained_nodes": outcome.drained_nodes,
            "time_to_detect_s": round(t_detect - t_fault, 2),
            "time_to_recover_s": round(t_running - t_detect, 2),
            "job_completed": completed,
            "workflow_id": workflow_id,
            "job_id": job_id,
            "job_restarts": final.restart_count,
            "resumed_from_step": checkpoint.resume_step if checkpoint else None,
            "damaged_checkpoint": damaged,
            "checkpoint_note": checkpoint.note if checkpoint else None,
            "final_params_sha256": final_sha,
            "uninterrupted_params_sha256": reference_sha,
            "params_equal_uninterrupted": (final_sha == reference_sha) if reference_sha else None,
            "goodput": cost.goodput,
            "ettr": cost.ettr,
            "lost_s": lost_by_part(cost),
            "ui_url": self.server.ui_url if self.server else None,
            "slurm_settings": {
                "SlurmdTimeout": 5,
                "AuthInfo": "cred_expire=5",
                "SchedulerParameters": "sched_interval=2,bf_interval=1",
                "watcher_poll_s": config.watcher.poll_interval_s,
            },
        }

    async def _goodput(self, client: Client, cluster: LocalSlurm, job_id: str) -> JobGoodput:
        """What the interruption cost the job (``resurrect goodput --job``)."""
        recoveries = await load_recoveries(client, job_id=job_id, cluster=cluster.cluster_name)
        cost = await job_goodput(
            cluster.scheduler(), cluster.cluster_name, job_id, recoveries, datetime.now(UTC)
        )
        lost = ", ".join(f"{k} {v:.1f} s" for k, v in lost_by_part(cost).items())
        shown = f"{cost.goodput * 100:.1f}%" if cost.goodput is not None else "unknown"
        self.say(f"goodput {shown} of {cost.wall_s:.1f} s; lost: {lost}")
        return cost

    def _check_job_user_can_train(self, root: Path, user: str) -> None:
        """The job runs as ``user``: it must be able to run this Python and read the job."""
        probe = subprocess.run(
            ["runuser", "-u", user, "--", self.settings.python, "-c",
             "import sys, torch; open(sys.argv[1]).close()",
             str(root / "examples" / "train" / "train.py")],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if probe.returncode != 0:
            raise DemoError(
                f"the job user {user} cannot run {self.settings.python} with torch or read"
                f" {root}/examples/train (is a parent directory private, e.g. /root?):"
                f" {probe.stderr.strip()[-300:]}"
            )

    def _reference_key(self, root: Path) -> tuple[str, str, int, int]:
        """What the uninterrupted run's final parameters depend on."""
        s = self.settings
        return (s.python, str(root), s.train_steps, s.ckpt_every)

    def _reference_sha(self, root: Path, scratch: Path) -> str | None:
        """Train the same job uninterrupted on this host and return its final params sha."""
        s = self.settings
        ckpt = scratch / f"reference-{int(time.time())}"
        argv = [
            s.python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            str(root / "examples" / "train" / "train.py"),
            "--ckpt-dir", str(ckpt), "--steps", str(s.train_steps),
            "--ckpt-every", str(s.ckpt_every),
        ]  # fmt: skip
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RESURRECT_TRAIN"))
        }
        result = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        if result.returncode != 0:
            self.say(f"reference run failed: {result.stderr[-500:]}")
            return None
        return _read_text(ckpt / "final.sha256")

    async def _wait_step_line_after(self, job_id: str, step: int) -> None:
        """Wait until the job printed a step line past ``step`` (training, not saving)."""
        job = await self._job(job_id)
        path = Path(job.stdout_path or "")
        deadline = time.monotonic() + 120
        pattern = re.compile(rb"\] step (\d+)/")
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if any(int(n) > step for n in pattern.findall(path.read_bytes()[-65536:])):
                    return
            await asyncio.sleep(0.05)
        raise DemoError(f"the job printed no step past {step}")

    def _rank_on(self, job_id: str, node: str) -> tuple[int, int]:
        """(rank, pid) of the job's rank process on ``node`` (as root, from /proc): the
        demo user's processes in the job's steps."""
        owner = pwd.getpwnam(self.cluster.demo_user).pw_uid if self.cluster else None
        for process in job_rank_processes(
            job_id,
            owner_uid=owner,
            node=node,
            slurm_conf=self.cluster.slurm_conf if self.cluster else None,
        ):
            if process.node == node and process.rank is not None:
                return process.rank, process.pid
        raise DemoError(f"no rank process of job {job_id} on {node}")

    async def _wait_fault_line(self, job_id: str) -> float:
        """The wall-clock time the injected GPU error line was written (the file's mtime)."""
        assert self.cluster is not None
        job = await self._job(job_id)
        path = Path(job.stdout_path or "")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                text = path.read_bytes()[-65536:]
                if b"uncorrectable ECC error" in text:
                    return path.stat().st_mtime
            await asyncio.sleep(0.05)
        raise DemoError("the job never printed the injected GPU error")

    async def _wait_workflow_started(
        self, client: Client, workflow_id: str, timeout: float
    ) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                description = await client.get_workflow_handle(workflow_id).describe()
                if description.status is not None and description.status in (
                    WorkflowExecutionStatus.RUNNING,
                    WorkflowExecutionStatus.COMPLETED,
                ):
                    return description.start_time.timestamp()
            except RPCError:
                pass
            await asyncio.sleep(0.1)
        raise DemoError(f"no recovery workflow {workflow_id} within {timeout:.0f} s")

    async def close(self) -> None:
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
        if self.cluster is not None:
            await asyncio.to_thread(stop_local_slurm, self.cluster, purge=False)


async def _duty_cycle(pid: int) -> None:
    """Slow one process down for real: stopped most of the time, until cancelled or gone."""
    try:
        while True:
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(STRAGGLER_STOP_S)
            os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(STRAGGLER_RUN_S)
    except ProcessLookupError:
        return
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _culprit(outcome: RecoveryOutcome) -> tuple[int | None, str | None]:
    """The culprit rank and node the recovery's diagnosis names from the ranks' stacks (a
    hang) or from who waits for whom (a straggler)."""
    diagnosis = outcome.diagnosis
    if diagnosis is None:
        return None, None
    for evidence in [*diagnosis.evidence, *diagnosis.cascade]:
        if (
            evidence.kind in (SignalKind.STACK_DUMP, SignalKind.PROGRESS)
            and evidence.role == "root"
        ):
            return evidence.rank, evidence.host
    ranks, hosts = diagnosis.culprit_ranks, diagnosis.culprit_hosts
    return (ranks[0] if ranks else None), (hosts[0] if hosts else None)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
