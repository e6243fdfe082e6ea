"""partition and freeze: faults of whole hosts, on a cluster whose nodes are hosts in
namespaces (``start.sh --hosts netns``).

* partition: a node of the job is cut from the controller both ways; its processes live on.
* freeze: every process of a node's host stops at once (a kernel hang), thawed later.

Either way the node's agent falls silent, resurrect starts a recovery, drains the node and
requeues the job; the requeue waits until the node has certainly fenced itself (its agent
kills the job's ranks there once its lease ran out: docs/fencing.md). A frozen host cannot
fence until it thaws: its ranks stop with it, and the agent kills them as it wakes, before
any heartbeat could renew its lease. The fault ends a few seconds after the job runs again
elsewhere; the repair workflow's health check then returns the node to service.

The result adds ``time_to_fence_s``: fault -> no live rank of the first attempt left on the
node (alive meaning not a zombie; a frozen rank counts as alive until it is killed).
"""

from __future__ import annotations

import asyncio
import contextlib
import pwd
import time
from typing import Any, ClassVar

from resurrect.contracts import JobState
from resurrect.demo.host_namespaces import host_of_process
from resurrect.demo.scenarios.base import Fault, OneFault
from resurrect.demo.stage import DemoSettings, Stage
from resurrect.stacks.processes import process_state, scan_rank_processes

UNDO_AFTER_RUNNING_S = 3.0
WATCH_S = 600.0


class HostFault(OneFault):
    """A fault of a node's whole host, undone once the job runs again elsewhere."""

    hosts: ClassVar[str] = "netns"
    node_agents = True

    def comment(self, settings: DemoSettings) -> dict[str, Any]:
        return {"max_restarts": 2}

    def train_steps(self, settings: DemoSettings) -> int:
        """Long enough that the job still trains when the node is cut off and fenced (the
        lease alone is 20 s)."""
        return max(settings.train_steps, 600)

    async def hit(self, stage: Stage, victim: str) -> None:
        raise NotImplementedError

    async def undo(self, stage: Stage, victim: str) -> None:
        raise NotImplementedError

    async def inject(self, stage: Stage, victim: str) -> Fault:
        at = self._fault_at = time.time()
        await self.hit(stage, victim)
        self._fenced_at: float | None = None
        self._tasks = [
            asyncio.create_task(self._watch_ranks(stage, victim)),
            asyncio.create_task(self._undo_later(stage, victim)),
        ]
        return Fault(at=at, node=victim)

    async def play(self, stage: Stage, victim: str) -> dict[str, Any]:
        try:
            result = await super().play(stage, victim)
        finally:
            for task in getattr(self, "_tasks", []):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            with contextlib.suppress(Exception):
                await self.undo(stage, victim)
        fenced = self._fenced_at
        result["time_to_fence_s"] = None if fenced is None else round(fenced - self._fault_at, 2)
        return result

    async def _watch_ranks(self, stage: Stage, victim: str) -> None:
        """When no live rank of the job's first attempt is left on ``victim``."""
        owner = pwd.getpwnam(stage.cluster.demo_user).pw_uid
        conf = stage.cluster.slurm_conf
        hosts = stage.cluster.host_map
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline:
            alive = [
                r
                for r in await asyncio.to_thread(scan_rank_processes)
                if r.job_id == stage.job_id
                and r.slurm_conf == conf
                and r.uid == owner
                and (r.step_node or host_of_process(hosts, r.process.pid)) == victim
                and r.restart_count == "0"
                and process_state(r.process.pid) not in ("", "Z", "X")
            ]
            if not alive:
                self._fenced_at = time.time()
                stage.say(f"no rank of the first attempt is left on {victim}")
                return
            await asyncio.sleep(0.2)

    async def _undo_later(self, stage: Stage, victim: str) -> None:
        await stage.wait_job(
            lambda j: j.state is JobState.RUNNING and j.restart_count > 0,
            stage.settings.timeout_s,
            "the job to run again",
        )
        await asyncio.sleep(UNDO_AFTER_RUNNING_S)
        await self.undo(stage, victim)


class Partition(HostFault):
    name = "partition"
    summary = (
        "a node of the job is cut from the controller (its processes live on); it fences"
        " itself, the job resumes elsewhere, the healed node returns through its health check"
    )

    async def hit(self, stage: Stage, victim: str) -> None:
        await asyncio.to_thread(stage.cluster.partition, victim)
        stage.say(f"FAULT: cut {victim} from the controller (both ways); its processes live on")

    async def undo(self, stage: Stage, victim: str) -> None:
        await asyncio.to_thread(stage.cluster.heal, victim)
        stage.say(f"healed the link of {victim}")


class Freeze(HostFault):
    name = "freeze"
    summary = (
        "every process of a node's host stops at once; the job resumes elsewhere, and the"
        " thawed node's agent kills the job's old ranks there before they run on"
    )

    async def hit(self, stage: Stage, victim: str) -> None:
        await asyncio.to_thread(stage.cluster.freeze_host, victim)
        stage.say(f"FAULT: froze every process of {victim}'s host")

    async def undo(self, stage: Stage, victim: str) -> None:
        await asyncio.to_thread(stage.cluster.thaw_host, victim)
        stage.say(f"thawed {victim}'s host")
