"""Self-fencing: a node cut off from the controller side kills its own processes of opted-in jobs.

The agent holds a lease the controller side renews: each heartbeat the liveness collector
acknowledged, or Temporal took, renews it *as of the time it was sent* (a late answer renews
nothing past that). When no renewal came for ``fencing.lease_s``, the node may be cut off
while a recovery requeues its jobs elsewhere; its processes of opted-in jobs would then write
the job's checkpoints (and its output) beside the new attempt. So the agent kills every one
of them (SIGKILL): the ranks, and with them the batch script, ``srun``, the launcher and any
child a rank started (a data loader, a checkpoint writer), as a cluster manager's watchdog
fences a node, and says so in its log. docs/fencing.md gives the timing
argument the recovery's requeue relies on (``FencingSettings.fenced_within_s``).

Which processes are a job's is the kernel's word (``scan_job_processes``: cgroup or
step-daemon ancestry, the owner's uid), never a job's environment. Which jobs are opted in is
the job's policy as Slurm reports its comment, learned while the node can still ask (one
lookup per new job, remembered for a bounded set); a job it never learned is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from resurrect.config import FencingSettings
from resurrect.contracts import JobInfo
from resurrect.errors import ResurrectError
from resurrect.stacks.processes import JobRank, scan_job_processes

log = logging.getLogger(__name__)

MAX_JOBS_REMEMBERED = 4096

Scan = Callable[[], list[JobRank]]
LookUp = Callable[[str], Awaitable[JobInfo]]
OptedIn = Callable[[JobInfo], bool]


def _net_namespace(pid: int | str) -> int | None:
    """The inode of ``pid``'s network namespace (the kernel's word), or None."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


class Lease:
    """The controller side's lease on this node: renewed with send times, on one clock."""

    def __init__(self, lease_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.lease_s = lease_s
        self._clock = clock
        self.confirmed_at = clock()  # a fresh agent starts with a fresh lease

    def renew(self, sent_at: float | None) -> None:
        if sent_at is not None and sent_at > self.confirmed_at:
            self.confirmed_at = sent_at

    def expired_for(self) -> float:
        """Seconds past expiry (<= 0 while it holds)."""
        return self._clock() - self.confirmed_at - self.lease_s


@dataclass
class FenceAction:
    """One fencing: the jobs whose processes were killed, their pids, when (time.time())."""

    at: float
    expired_for_s: float
    killed: dict[str, list[int]] = field(default_factory=dict)  # "job_id/attempt" -> pids


class SelfFence:
    """Learns the node's opted-in jobs while connected; kills their processes once cut off."""

    def __init__(
        self,
        settings: FencingSettings,
        node: str,
        lease: Lease,
        *,
        look_up: LookUp,
        opted_in: OptedIn,
        scan: Scan = scan_job_processes,
        kill: Callable[[int, int], None] = os.kill,
    ) -> None:
        self.settings = settings
        self.node = node
        self.lease = lease
        self._look_up = look_up
        self._opted_in = opted_in
        self._scan = scan
        self._kill = kill
        self.known: OrderedDict[str, tuple[bool, int | None]] = OrderedDict()  # id -> (in, uid)
        self.actions: list[FenceAction] = []

    def _local(self, scan: list[JobRank]) -> list[JobRank]:
        """The job processes on this node: their step daemon serves it, or (none known) they share
        this agent's network namespace (hosts that share one kernel, as the local cluster's
        do, are told apart by it; a process in a container's own namespace whose step daemon is
        not known is left alone)."""
        mine = _net_namespace("self")
        return [
            r
            for r in scan
            if r.step_node == self.node
            or (r.step_node is None and mine is not None and _net_namespace(r.process.pid) == mine)
        ]

    async def learn(self) -> None:
        """Ask Slurm about each job with processes here not asked about yet (bounded)."""
        local = await asyncio.to_thread(lambda: self._local(self._scan()))
        for job_id in dict.fromkeys(r.job_id for r in local):
            if job_id in self.known:
                continue
            try:
                job = await self._look_up(job_id)
            except ResurrectError as exc:  # cut off, or Slurm busy: next time
                log.debug("fence: job %s not looked up: %s", job_id, exc)
                return
            self.known[job_id] = (self._opted_in(job), job.user_id)
            while len(self.known) > MAX_JOBS_REMEMBERED:
                self.known.popitem(last=False)

    def fence_if_expired(self) -> FenceAction | None:
        """Kill every local process of opted-in jobs when the lease has expired."""
        expired_for = self.lease.expired_for()
        if expired_for <= 0:
            return None
        action = FenceAction(at=time.time(), expired_for_s=expired_for)
        for member in self._local(self._scan()):
            opted_in, owner = self.known.get(member.job_id, (False, None))
            if not opted_in or owner is None or member.uid != owner:
                continue
            with contextlib.suppress(ProcessLookupError):
                self._kill(member.process.pid, signal.SIGKILL)
                key = f"{member.job_id}/{member.restart_count}"
                action.killed.setdefault(key, []).append(member.process.pid)
        if action.killed:
            self.actions.append(action)
            log.warning(
                "fence: %s out of contact with the controller side for %.1f s past its"
                " %.1f s lease: killed the processes of %s",
                self.node, expired_for, self.lease.lease_s,
                ", ".join(f"job {k} (pids {v})" for k, v in sorted(action.killed.items())),
            )  # fmt: skip
            return action
        return None

    async def run(self, stop: asyncio.Event) -> None:
        """Check the lease every ``check_interval_s``; learn jobs while it holds."""
        last_learn = float("-inf")
        while not stop.is_set():
            try:
                if self.fence_if_expired() is None and (
                    time.monotonic() - last_learn >= self.settings.learn_interval_s
                ):
                    last_learn = time.monotonic()
                    await self.learn()
            except Exception:  # one failed pass must never stop the fence
                log.exception("fence check failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.settings.check_interval_s)
