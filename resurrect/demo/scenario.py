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
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState, RecoveryOutcome, recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm, repo_root, start_local_slurm, stop_local_slurm
from resurrect.service import ServiceParts, run_service
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal, free_port, port_open

Scenario = Literal["node-loss", "gpu-error", "checkpoint-damage"]
SCENARIOS: tuple[Scenario, ...] = ("node-loss", "gpu-error", "checkpoint-damage")

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

    def _config(self, slurm_conf: str, cluster_name: str, address: str) -> ResurrectConfig:
        return ResurrectConfig.model_validate(
            {
                "mode": "act",
                "cluster": {"name": cluster_name, "slurm_conf": slurm_conf, "scheduler": "cli"},
                "temporal": {
                    "embedded": False,
                    "address": address,
                    "state_dir": str(self.settings.state_dir / "resurrect"),
                },
                "watcher": {"poll_interval_s": 1.0, "log_poll_interval_s": 0.1},
                "recovery": {"wait_running_timeout_s": 300},
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
            start_local_slurm, nodes=s.nodes, cluster_name="demo", state_dir=s.state_dir / "slurm"
        )
        self.say(f"cluster up in {cluster.start_seconds:.1f} s: {', '.join(cluster.nodes)}")
        await asyncio.to_thread(self._check_job_user_can_train, root, cluster.demo_user)

        ui_port = s.ui_port if not port_open("127.0.0.1", s.ui_port) else free_port()
        self.server = EmbeddedTemporal(
            state_dir=s.state_dir / "temporal", port=free_port(), ui_port=ui_port
        )
        await asyncio.to_thread(self.server.start)
        self.say(f"Temporal dev server on {self.server.address}; web UI: {self.server.ui_url}")
        config = self._config(cluster.slurm_conf, cluster.cluster_name, self.server.address)
        client = await connect(config.temporal, attempts=20)
        stop = asyncio.Event()
        service = asyncio.create_task(
            run_service(config, ServiceParts(), stop, client=client, scheduler=cluster.scheduler())
        )
        try:
            return await self._scenario(root, cluster, client, config)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(service, timeout=30)

    async def _scenario(
        self, root: Path, cluster: LocalSlurm, client: Client, config: ResurrectConfig
    ) -> dict[str, Any]:
        s = self.settings
        ckpt_dir = cluster.out_dir / f"ckpt-{s.scenario}-{int(time.time())}"
        ckpt_dir.mkdir(parents=True)
        shutil.chown(ckpt_dir, user=cluster.demo_user)
        comment = json.dumps(
            {"resurrect": {"max_restarts": 2, "checkpoint_dir": str(ckpt_dir)}},
            separators=(",", ":"),
        )
        env_args = [
            f"--export=ALL,RESURRECT_PYTHON={s.python},"
            f"RESURRECT_TRAIN_DIR={root / 'examples' / 'train'},"
            f"CKPT_DIR={ckpt_dir},RESURRECT_TRAIN_STEPS={s.train_steps},"
            f"RESURRECT_TRAIN_CKPT_EVERY={s.ckpt_every},RESURRECT_TRAIN_SLEEP={s.step_sleep_s}"
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
        if s.scenario == "gpu-error":
            self.say(
                f"rank 1 on {victim} will report a fatal GPU error at step {s.fault_after_step}"
            )
            t_fault = await self._wait_fault_line(job_id)
        else:
            if s.scenario == "checkpoint-damage":
                # the newest checkpoint is torn by the crash: resurrect must fall back
                damaged = _damage_newest_checkpoint(ckpt_dir)
                self.say(f"damaged the newest checkpoint: truncated {damaged}")
            t_fault = time.time()
            await asyncio.to_thread(cluster.kill_node, victim)
            self.say(f"FAULT: killed node {victim} (its slurmd and every process of the job on it)")

        t_detect = await self._wait_workflow_started(client, workflow_id, timeout=120)
        self.say(f"recovery {workflow_id} started {t_detect - t_fault:.1f} s after the fault")
        self.say(
            f"watch it: {self.server.ui_url if self.server else ''}"
            f"/namespaces/default/workflows/{workflow_id}"
        )

        running = await self._wait_job(
            job_id,
            lambda j: j.state is JobState.RUNNING and j.restart_count > 0 and victim not in j.nodes,
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

        final = await self._wait_job(
            job_id,
            lambda j: j.state not in (JobState.RUNNING, JobState.PENDING, JobState.COMPLETING),
            s.timeout_s,
            "training to finish",
        )
        completed = final.state is JobState.COMPLETED
        self.say(f"job {job_id} finished: {final.state.value}")
        checkpoint = outcome.checkpoint
        final_sha = _read_text(ckpt_dir / "final.sha256")
        reference_sha = None
        if s.reference_run and completed:
            self.say("running the same training uninterrupted (torchrun --standalone) to compare")
            reference_sha = await asyncio.to_thread(self._reference_sha, root, cluster.out_dir)
            self.say(
                "final parameters "
                + ("EQUAL to" if final_sha == reference_sha else "DIFFERENT from")
                + " the uninterrupted run's"
            )
        return {
            "scenario": s.scenario,
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
            "ui_url": self.server.ui_url if self.server else None,
            "slurm_settings": {
                "SlurmdTimeout": 5,
                "AuthInfo": "cred_expire=5",
                "SchedulerParameters": "sched_interval=2,bf_interval=1",
                "watcher_poll_s": config.watcher.poll_interval_s,
            },
        }

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


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
