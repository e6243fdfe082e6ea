"""What a demo scenario plays on: the settings, the running cluster and Temporal, the job.

:class:`Stage` holds what :class:`resurrect.demo.scenario.Demo` started and submitted, and
the waits every scenario builds on (a job state, a recovery workflow, a line the job
printed, a rank process on a node). Checkpoint helpers read the job's checkpoint folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import pwd
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo
from resurrect.demo.local_cluster import LocalSlurm
from resurrect.errors import SchedulerError
from resurrect.log_reading import TailRead, read_tail
from resurrect.stacks.processes import job_rank_processes

if TYPE_CHECKING:
    from resurrect.sensors.node_agent import FakeNvml

Progress = Callable[[str], None]
# What the example job prints when it reports a fatal GPU error (train.py's
# fail_like_a_lost_gpu): "<host>:<pid>:<pid> [0] NCCL WARN Cuda failure '...ECC...'"
_GPU_ERROR_HOST = re.compile(rb"^([A-Za-z0-9._-]+):\d+:\d+ \[\d+\] NCCL WARN .*ECC", re.M)
_STEP_LINE = re.compile(rb"\] step (\d+)/")
OUTPUT_TAIL_BYTES = 65536


@dataclass
class DemoSettings:
    """One demo run: the scenario (a name in :data:`resurrect.demo.scenarios.SCENARIOS`), the
    cluster, the training job and the limits."""

    scenario: str = "node-loss"
    state_dir: Path = Path("/tmp/resurrect-demo")
    nodes: int = 4
    train_steps: int = 120
    ckpt_every: int = 20
    step_sleep_s: float = 0.1
    fault_after_step: int = 45
    ui_port: int = 8233
    timeout_s: float = 600.0
    reference_run: bool = True  # train once more uninterrupted and compare final params
    # where the uninterrupted runs' final parameter shas are kept, by settings, for other demo
    # processes too (the test suite's processes share one); None: this process only
    reference_dir: Path | None = None
    # crash-loop: the job's comment lowers the policy's no_progress_restarts to this (None:
    # the policy's own, 3)
    no_progress_restarts: int | None = None
    python: str = field(default_factory=lambda: sys.executable)
    # resurrect's backend: "cli", or "slurmrestd" (the cluster also runs slurmrestd)
    scheduler: str = "cli"


class DemoError(RuntimeError):
    """The demo could not play its scenario (a wait ran out, a step failed)."""


@dataclass
class Stage:
    """The running demo: its cluster, Temporal client and configuration, the submitted job."""

    settings: DemoSettings
    say: Progress
    root: Path
    cluster: LocalSlurm
    client: Client
    config: ResurrectConfig
    ui_url: str
    job_id: str
    ckpt_dir: Path
    # the node agents' simulated GPUs, by node (scenarios with node agents)
    simulated_gpus: dict[str, FakeNvml] = field(default_factory=dict)
    # the steps the job trains (the scenario's; 0: the settings')
    train_steps: int = 0
    # the file whose creation lets the job's first attempt go on after the checkpoint the
    # fault waits for (the job holds there, so the fault lands mid-training however slowly
    # the demo notices the checkpoint); None: the job does not hold
    hold_file: Path | None = None

    def release_hold(self) -> None:
        """Let the job go on past its hold (the fault is injected)."""
        if self.hold_file is not None:
            self.hold_file.touch()

    async def job(self) -> JobInfo:
        """The job as the scheduler reports it now."""
        return await self.cluster.scheduler().get_job(self.job_id)

    async def wait_job(self, ok: Callable[[JobInfo], bool], timeout: float, what: str) -> JobInfo:
        """The job once ``ok`` holds for it; DemoError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        last: JobInfo | None = None
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                last = await self.job()
                if ok(last):
                    return last
            await asyncio.sleep(0.2)
        raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}; last state: {last}")

    async def wait_workflow_started(self, workflow_id: str, timeout: float) -> float:
        """The start time (epoch seconds) of the recovery ``workflow_id`` once it exists."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                description = await self.client.get_workflow_handle(workflow_id).describe()
                if description.status is not None and description.status in (
                    WorkflowExecutionStatus.RUNNING,
                    WorkflowExecutionStatus.COMPLETED,
                ):
                    return description.start_time.timestamp()
            except RPCError:
                pass
            await asyncio.sleep(0.1)
        raise DemoError(f"no recovery workflow {workflow_id} within {timeout:.0f} s")

    async def output_path(self) -> Path:
        """The job's output file."""
        return Path((await self.job()).stdout_path or "")

    async def output_tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines the job printed, read as job output is (bounded, a regular
        file of the job's user, no link followed), or why they cannot be: what an error about
        the job shows."""
        try:
            path = await self.output_path()
        except SchedulerError as exc:
            return f"(its output file is unknown: {exc})"
        tail = self._read_output(path)
        shown = [text for _, text in tail.lines[-lines:]]
        return "\n".join([*shown, *([f"({tail.note})"] if tail.note else [])])

    async def wait_step_line_after(self, step: int) -> None:
        """Wait until the job printed a step line past ``step`` (training, not saving)."""
        path = await self.output_path()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            tail = _joined(self._read_output(path))
            if any(int(n) > step for n in _STEP_LINE.findall(tail)):
                return
            await asyncio.sleep(0.05)
        raise DemoError(f"the job printed no step past {step}")

    async def wait_gpu_error(self, count: int = 1, timeout: float = 180) -> tuple[float, str]:
        """(the time the job's output was written, the host named) once the job has printed
        its ``count``-th fatal GPU error line (one per attempt that failed so)."""
        path = await self.output_path()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hosts = gpu_error_hosts(_joined(self._read_output(path)))
            if len(hosts) >= count:
                with contextlib.suppress(OSError):
                    return path.lstat().st_mtime, hosts[count - 1]
            await asyncio.sleep(0.05)
        raise DemoError(f"the job did not print GPU error number {count} within {timeout:.0f} s")

    def _read_output(self, path: Path) -> TailRead:
        """The tail of the job's output as job output is read (bounded, a regular file of
        the demo user, no link followed)."""
        owner = pwd.getpwnam(self.cluster.demo_user).pw_uid
        return read_tail(path, OUTPUT_TAIL_BYTES, owner_uid=owner)

    def rank_on(self, node: str) -> tuple[int, int]:
        """(rank, pid) of the job's rank process on ``node`` (as root, from /proc): the
        demo user's processes in the job's steps."""
        owner = pwd.getpwnam(self.cluster.demo_user).pw_uid
        for process in job_rank_processes(
            self.job_id, owner_uid=owner, node=node, slurm_conf=self.cluster.slurm_conf
        ):
            if process.node == node and process.rank is not None:
                return process.rank, process.pid
        raise DemoError(f"no rank process of job {self.job_id} on {node}")

    def workflow_url(self, workflow_id: str) -> str:
        """The recovery ``workflow_id`` in the Temporal web UI."""
        return f"{self.ui_url}/namespaces/default/workflows/{workflow_id}"


def checkpoint_steps(ckpt_dir: Path) -> list[int]:
    """The steps of the complete checkpoints (``step_N`` with DCP metadata), ascending."""
    steps = []
    for entry in ckpt_dir.glob("step_*"):
        if (entry / ".metadata").exists():
            with contextlib.suppress(ValueError):
                steps.append(int(entry.name.split("_", 1)[1]))
    return sorted(steps)


def _joined(tail: TailRead) -> bytes:
    return "\n".join(text for _, text in tail.lines).encode()


def gpu_error_hosts(output: bytes) -> list[str]:
    """The hosts named by the fatal GPU error lines in the job's ``output``, in order."""
    return [host.decode() for host in _GPU_ERROR_HOST.findall(output)]


def read_text(path: Path) -> str | None:
    """The stripped text of ``path``; None when it is missing, unreadable or empty."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
