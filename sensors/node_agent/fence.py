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
lookup per new job, remembered for a bounded set). A job whose lookup failed or has not
answered yet (the node already cut off: Slurm may have started it there just before the cut,
and treats the node as lost now) is fenced with the opted-in ones unless it runs as root:
what it is cannot be known, and a job left running on a node the controller side has given
up on may run twice. A job never seen while the lease held is left alone. The lookups run in
a task of their own: one waiting on a controller out of reach never holds back the lease's
next check.

A job whose oldest process here (the kernel's start time) started before the lease ran out
is fenced the moment it runs out. One that started after (a healed link, Slurm starting the
job's next attempt before the first renewal came back) was started by a controller that
reached the node: it is the current attempt, not one a recovery may have requeued, and
fencing it would end the job the recovery just restarted. It holds a lease of its own from its
start, and is fenced only if no renewal comes within it. Once a job is fenced, it stays fenced
until the lease is renewed, so a process its old attempt started during the kill is not
spared for being young.

A frozen host thaws all at once: its processes run again in the same instant as the agent,
and an old attempt's ``srun``, told by its step daemon to stop, cancels its step through
slurmctld - the step of the same number of the attempt now running elsewhere. A rescan of
``/proc`` takes too long to win that race, so while the lease holds the agent keeps a handle
(:class:`PidHandles`: a pidfd, opened only on a process that started before the scan that
found it, so a reused pid is never reached) on each process it would kill, refreshed with
each ``learn``; on expiry it kills through those first, then rescans for the rest.

Each process is sent its SIGKILL once per expiry (told apart from a later one with its pid by
its kernel start time): one that outlives it (in uninterruptible sleep on a file system that
went with the link, or a zombie its step daemon has not reaped yet) dies when it can, and the
checks that follow neither signal it again nor log it again, however long the link stays cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from resurrect.config import FencingSettings
from resurrect.contracts import JobInfo
from resurrect.errors import JobNotFound, ResurrectError
from resurrect.stacks.processes import JobRank, scan_job_processes

log = logging.getLogger(__name__)
_V = TypeVar("_V")

MAX_JOBS_REMEMBERED = 4096
MAX_HANDLES = 4096
MAX_SIGNALLED = 4096  # processes remembered as killed in one expiry (beyond: signalled again)
ACTIONS_KEPT = 64

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


def boot_ticks() -> int:
    """Now, in clock ticks since boot (the clock of ``/proc/PID/stat``'s start time)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def process_age_s(pid: int) -> float | None:
    """How long ``pid`` has run, in seconds (the kernel's start time), or None when gone."""
    started = _start_ticks(pid)
    return None if started is None else (boot_ticks() - started) / os.sysconf("SC_CLK_TCK")


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read(4096)
    except OSError:
        return None
    fields = raw.rpartition(b")")[2].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


class PidHandles:
    """Kernel handles (pidfds) on processes: a signal through one reaches that process or
    nothing, never another that reused its pid."""

    def open(self, pid: int, scanned_at: int) -> int | None:
        """A handle on ``pid`` if it is the process a scan begun at ``scanned_at`` (boot
        ticks) saw: one that started later is another process with the same pid."""
        try:
            handle = os.pidfd_open(pid)
        except OSError:
            return None
        started = _start_ticks(pid)
        if started is None or started > scanned_at:
            os.close(handle)
            return None
        return handle

    def kill(self, handle: int) -> bool:
        """SIGKILL through ``handle``; False when the process is gone already."""
        try:
            signal.pidfd_send_signal(handle, signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True

    def close(self, handle: int) -> None:
        with contextlib.suppress(OSError):
            os.close(handle)


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
        handles: PidHandles | None = None,
        age_s: Callable[[int], float | None] = process_age_s,
        started: Callable[[int], int | None] = _start_ticks,
    ) -> None:
        self.settings = settings
        self.node = node
        self.lease = lease
        self._look_up = look_up
        self._opted_in = opted_in
        self._scan = scan
        self._kill = kill
        self._handles = handles
        self._age_s = age_s
        self._started = started
        self._fenced: set[str] = set()  # jobs fenced since the lease last held
        # processes sent their SIGKILL since the lease last held: (pid, kernel start time)
        self._signalled: set[tuple[int, int | None]] = set()
        self._armed: dict[int, tuple[int, str]] = {}  # pid -> (handle, "job/attempt")
        self.known: OrderedDict[str, tuple[bool, int | None]] = OrderedDict()  # id -> (in, uid)
        # jobs with processes here whose lookup failed or is under way (a set, oldest first)
        self.unconfirmed: OrderedDict[str, None] = OrderedDict()
        self.actions: deque[FenceAction] = deque(maxlen=ACTIONS_KEPT)  # the latest

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
        """Ask Slurm about each job with processes here not asked about yet (bounded);
        hold a handle on each local process of an opted-in job."""
        scanned_at = boot_ticks()
        local = await asyncio.to_thread(lambda: self._local(self._scan()))
        unknown = [j for j in dict.fromkeys(r.job_id for r in local) if j not in self.known]
        for job_id in unknown:  # seen while the lease holds: unconfirmed until Slurm answers
            _remember(self.unconfirmed, job_id, None)
        for job_id in unknown:
            try:
                job = await self._look_up(job_id)
            except JobNotFound:  # Slurm's word: no such job (not one of ours to fence)
                self.unconfirmed.pop(job_id, None)
                _remember(self.known, job_id, (False, None))
                continue
            except ResurrectError as exc:  # cut off, or Slurm busy: asked again next time
                log.debug("fence: job %s not looked up: %s", job_id, exc)
                break
            self.unconfirmed.pop(job_id, None)
            _remember(self.known, job_id, (self._opted_in(job), job.user_id))
        self._arm(local, scanned_at)

    def _fenceable(self, member: JobRank) -> bool:
        if member.job_id not in self.known:  # never looked up, or its lookup failed
            return member.job_id in self.unconfirmed and member.uid != 0
        opted_in, owner = self.known[member.job_id]
        return opted_in and owner is not None and member.uid == owner

    def _arm(self, local: list[JobRank], scanned_at: int) -> None:
        """Keep a handle on each process of ``local`` the fence would kill (and on no other)."""
        if self._handles is None:
            return
        wanted = {
            m.process.pid: f"{m.job_id}/{m.restart_count}" for m in local if self._fenceable(m)
        }
        for pid in [p for p in self._armed if p not in wanted]:
            self._handles.close(self._armed.pop(pid)[0])
        for pid, key in wanted.items():
            if pid in self._armed or len(self._armed) >= MAX_HANDLES:
                continue
            handle = self._handles.open(pid, scanned_at)
            if handle is not None:
                self._armed[pid] = (handle, key)

    def disarm(self) -> None:
        """Close every handle."""
        for handle, _ in self._armed.values():
            if self._handles is not None:
                self._handles.close(handle)
        self._armed.clear()

    def _to_fence(self, pids_by_job: dict[str, list[int]], expired_for: float) -> set[str]:
        """The jobs of ``pids_by_job`` fenced already, or whose oldest live process started
        before the lease ran out (``expired_for`` seconds ago) or has run longer than a lease
        of its own."""
        bound = min(expired_for, self.lease.lease_s)
        return {
            job_id
            for job_id, pids in pids_by_job.items()
            if job_id in self._fenced
            or max((self._age_s(pid) or 0.0 for pid in pids), default=0.0) > bound
        }

    def fence_if_expired(self) -> FenceAction | None:
        """Kill every local process of opted-in jobs when the lease has expired (but of a job
        started since, see the module)."""
        expired_for = self.lease.expired_for()
        if expired_for <= 0:
            self._fenced.clear()
            self._signalled.clear()
            return None
        if len(self._signalled) > MAX_SIGNALLED:
            self._signalled.clear()
        action = FenceAction(at=time.time(), expired_for_s=expired_for)
        if self._handles is not None:  # first what is known: no scan stands in the way
            armed: dict[str, list[int]] = {}
            for pid, (_, key) in self._armed.items():
                armed.setdefault(key.partition("/")[0], []).append(pid)
            self._fenced |= self._to_fence(armed, expired_for)
            for pid, (handle, key) in list(self._armed.items()):
                if key.partition("/")[0] not in self._fenced:
                    continue
                process = (pid, self._started(pid))
                if process not in self._signalled and self._handles.kill(handle):
                    action.killed.setdefault(key, []).append(pid)
                    self._signalled.add(process)
        # the rest, each with its identity (pid, kernel start time): those just killed through
        # a handle are among the signalled
        left: list[tuple[JobRank, tuple[int, int | None]]] = []
        for member in self._local(self._scan()):
            if self._fenceable(member):
                process = (member.process.pid, self._started(member.process.pid))
                if process not in self._signalled:
                    left.append((member, process))
        by_job: dict[str, list[int]] = {}
        for member, (pid, _) in left:
            by_job.setdefault(member.job_id, []).append(pid)
        self._fenced |= self._to_fence(by_job, expired_for)
        for member, process in left:
            if member.job_id not in self._fenced:
                continue
            pid = member.process.pid
            with contextlib.suppress(ProcessLookupError):
                self._kill(pid, signal.SIGKILL)
                key = f"{member.job_id}/{member.restart_count}"
                action.killed.setdefault(key, []).append(pid)
                self._signalled.add(process)
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
        """Check the lease every ``check_interval_s``; learn jobs while it holds, in a task of
        its own (a lookup waiting on a controller out of reach must not delay a check)."""
        last_learn = float("-inf")
        learning: asyncio.Task[None] | None = None
        try:
            while not stop.is_set():
                try:
                    if (
                        self.fence_if_expired() is None
                        and (learning is None or learning.done())
                        and time.monotonic() - last_learn >= self.settings.learn_interval_s
                    ):
                        last_learn = time.monotonic()
                        learning = asyncio.create_task(self.learn())
                        learning.add_done_callback(_log_failed_learning)
                except Exception:  # one failed pass must never stop the fence
                    log.exception("fence check failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.settings.check_interval_s)
        finally:
            if learning is not None:
                learning.cancel()  # it stops at the await it is in: it arms nothing after this
            self.disarm()


def _log_failed_learning(task: asyncio.Task[None]) -> None:
    """A learning pass that failed is logged (the next one runs as usual)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("fence: learning the node's jobs failed", exc_info=task.exception())


def _remember(kept: OrderedDict[str, _V], key: str, value: _V) -> None:
    """Keep ``key`` in ``kept``, dropping the oldest beyond MAX_JOBS_REMEMBERED."""
    kept[key] = value
    while len(kept) > MAX_JOBS_REMEMBERED:
        kept.popitem(last=False)
