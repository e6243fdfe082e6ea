"""The Slurm watcher: notices job and node transitions and reports interruptions.

It polls the scheduler (``watcher.poll_interval_s``; a push hook can ``kick`` it to poll at
once) and reports, for opted-in jobs only:

* a job that ended NODE_FAIL, FAILED, TIMEOUT, PREEMPTED, OUT_OF_MEMORY (or BOOT_FAIL,
  DEADLINE), keyed by the attempt that ended;
* a running job one of whose nodes went DOWN / NOT_RESPONDING (a suspected node loss, often
  seconds before the job itself is failed);
* a job slurmctld requeued by itself (its restart count went up while we watched it run):
  the attempt we saw running was interrupted;
* a requeued job whose next launch failed, which slurmctld requeued again and held
  (``launch failed requeued held``, :attr:`JobInfo.held_after_failed_launch`): the attempt
  that never started was interrupted, and its recovery releases Slurm's hold. A requeued job
  stays in the watcher's view (``watcher.watch_requeued_s``) until it runs again or ends, and
  every ``watcher.held_scan_interval_s`` a look at the pending queue brings in the jobs held
  so that it never saw run (a new job whose first launch failed).

Each report is an :class:`Interruption` handed to ``report`` (normally
:func:`sensors.report.report_interruption`); the workflow id is per (cluster, job, attempt),
so reporting twice is harmless. The watcher never touches the scheduler itself.

Each poll reads only what can matter (the backend's view, :mod:`resurrect.scheduler.base`):
running and recently failed jobs, the jobs it saw running last time or requeued since (a
requeued job is pending again), and the nodes that are not healthy, so its cost follows what
runs and what was interrupted, not what is queued.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Container
from datetime import UTC, datetime

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    FAILED_JOB_STATES,
    FINISHED_JOB_STATES,
    RUNNING_JOB_STATES,
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    NodeInfo,
)
from resurrect.errors import SchedulerError
from resurrect.evidence_trust import UnavailabilityReads, needs_to_last
from resurrect.job_notes import JobNotes
from resurrect.policy import PolicyResolution, resolve_job_policy
from resurrect.rules.scheduler_evidence import STATE_CLASS
from resurrect.scheduler.base import Scheduler
from resurrect.sensors.report import ReportInterruption
from resurrect.telemetry.record import record_watcher_poll, track_drained_nodes

log = logging.getLogger(__name__)


MIN_POLL_GAP_S = 0.5
# At most this many requeued jobs are kept in the view (the longest kept let go first), so a
# burst of requeues adds a bounded number of rows to each poll.
MAX_REQUEUED_IN_VIEW = 1024


class SlurmWatcher:
    """Polls the scheduler and reports interruptions of opted-in jobs."""

    def __init__(
        self,
        scheduler: Scheduler,
        config: ResurrectConfig,
        report: ReportInterruption,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock  # monotonic seconds
        self.scheduler = scheduler
        self.config = config
        self.report = report
        self._last_jobs: dict[str, JobInfo] = {}
        # requeued jobs kept in the view until they run again or end, or until this time
        self._requeued: dict[str, float] = {}
        self._next_held_scan: float | None = None  # monotonic; the first one interval in
        self._reported: set[str] = set()
        self._unavailability = UnavailabilityReads()
        # each job's policy, kept while the scheduler hands back the same JobInfo object
        self._resolutions: dict[str, tuple[JobInfo, PolicyResolution]] = {}
        self._quiet_until = 0.0  # no NOT_RESPONDING verdicts until then (controller came back)
        self._kick = asyncio.Event()
        self.polls = 0
        self.kicks = 0
        self.notes = JobNotes(log)

    @property
    def requeued_in_view(self) -> frozenset[str]:
        """The requeued jobs kept in the view (until they run again or end, at most
        ``watcher.watch_requeued_s``)."""
        return frozenset(self._requeued)

    def kick(self) -> None:
        """Poll now (Slurm hooks call this through :mod:`sensors.watcher_kick`)."""
        self.kicks += 1
        self._kick.set()

    def _interruption(
        self,
        job: JobInfo,
        bad_nodes: Container[str],
        *,
        reason: str,
        state: JobState | None,
        hint: FaultClass | None,
    ) -> Interruption:
        """An interruption of ``job`` as given (its restart count and nodes), suspecting those
        of its nodes that are in ``bad_nodes``."""
        return Interruption(
            cluster=self.config.cluster.name,
            job_id=job.job_id,
            restart_count=job.restart_count,
            source="slurm_watcher",
            reason=reason,
            observed_at=datetime.now(UTC),
            job_state=state,
            nodes=list(job.nodes),
            suspect_nodes=[n for n in job.nodes if n in bad_nodes],
            fault_hint=hint,
        )

    def _lost_nodes(self, nodes: list[NodeInfo], now: float) -> dict[str, NodeInfo]:
        """Nodes to treat as lost: DOWN at once; only NOT_RESPONDING once it persisted
        (:class:`UnavailabilityReads`). ``nodes`` may be every node or only the unhealthy
        ones: a node not shown is healthy."""
        lasting = self._unavailability.observe(
            nodes, now, self.config.watcher.not_responding_grace_s
        )
        return {
            node.name: node
            for node in nodes
            if node.unavailable
            and (not needs_to_last(node) or (node.name in lasting and now >= self._quiet_until))
        }

    def controller_unreachable(self, now: float | None = None) -> None:
        """The controller did not answer: when it is back, give nodes time to re-register."""
        now = self.clock() if now is None else now
        self._quiet_until = now + self.config.watcher.controller_grace_s
        self._unavailability.forget()

    def detect(
        self, jobs: list[JobInfo], nodes: list[NodeInfo], now: float | None = None
    ) -> list[Interruption]:
        """The interruptions this snapshot shows (no I/O; ``now`` is a monotonic time)."""
        found: list[Interruption] = []
        now = self.clock() if now is None else now
        bad_nodes = self._lost_nodes(nodes, now)
        self._follow_requeued(jobs, now)
        for job in jobs:
            if (
                job.state is JobState.RUNNING
                and self._last_jobs.get(job.job_id) is job
                and not (bad_nodes and any(n in bad_nodes for n in job.nodes))
            ):
                continue  # the same running record as last poll, no node lost: nothing new
            try:
                found.extend(self._detect_job(job, bad_nodes))
            except Exception as exc:  # one job's bad data must not stop the others
                self.notes.failed(job.job_id, "checking the job", exc)
        self._last_jobs = {job.job_id: job for job in jobs}
        self._resolutions = {
            job_id: known
            for job_id, known in self._resolutions.items()
            if job_id in self._last_jobs
        }
        return [i for i in found if i.workflow_id not in self._reported]

    def _follow_requeued(self, jobs: list[JobInfo], now: float) -> None:
        """Keep in the view each job seen running before and requeued now; let go of those
        running again, ended, gone from Slurm or kept past ``watcher.watch_requeued_s``."""
        shown = {job.job_id: job for job in jobs}
        for job_id, job in shown.items():
            before = self._last_jobs.get(job_id)
            if (
                before is not None
                and before.state in RUNNING_JOB_STATES
                and job.restart_count > before.restart_count
            ):
                self._requeued[job_id] = now + self.config.watcher.watch_requeued_s
        for job_id, until in list(self._requeued.items()):
            now_shown = shown.get(job_id)
            if (
                now_shown is None
                or now >= until
                or now_shown.state is JobState.RUNNING
                or now_shown.state in FINISHED_JOB_STATES
            ):
                del self._requeued[job_id]
        if len(self._requeued) > MAX_REQUEUED_IN_VIEW:
            kept_longest = sorted(self._requeued, key=self._requeued.__getitem__)
            for job_id in kept_longest[: len(self._requeued) - MAX_REQUEUED_IN_VIEW]:
                del self._requeued[job_id]

    async def _scan_held(self) -> None:
        """Every ``watcher.held_scan_interval_s``, put the pending jobs slurmctld held after a
        failed launch in the view (as requeued jobs): a job whose first launch failed was
        never seen running, so nothing else brings it there."""
        interval = self.config.watcher.held_scan_interval_s
        now = self.clock()
        if interval <= 0:
            return
        if self._next_held_scan is None:
            self._next_held_scan = now + interval
        if now < self._next_held_scan:
            return
        self._next_held_scan = now + interval
        for job_id in await self.scheduler.list_held_after_failed_launch():
            self._requeued.setdefault(job_id, now + self.config.watcher.watch_requeued_s)

    def _detect_job(self, job: JobInfo, bad_nodes: dict[str, NodeInfo]) -> list[Interruption]:
        """The interruption ``job`` shows in this snapshot, if it is opted in."""
        found: list[Interruption] = []
        known = self._resolutions.get(job.job_id)
        if known is not None and known[0] is job:
            resolution = known[1]  # the same record as last poll: its problems were noted
        else:
            resolution = resolve_job_policy(job, self.config)
            self._resolutions[job.job_id] = (job, resolution)
            for problem in resolution.problems:
                self.notes.note(job.job_id, problem)
        if not resolution.opted_in:
            self._requeued.pop(job.job_id, None)  # nothing to watch it for
            return found
        before = self._last_jobs.get(job.job_id)
        if job.state in FAILED_JOB_STATES:
            found.append(
                self._interruption(
                    job,
                    bad_nodes,
                    reason=f"job ended {job.state.value}",
                    state=job.state,
                    hint=STATE_CLASS.get(job.state),
                )
            )
        elif (
            # a held job is being requeued (by us or an operator): its old allocation may
            # still show the dead node while it completes, which is no new interruption
            job.state is JobState.RUNNING
            and not job.held
            and any(n in bad_nodes for n in job.nodes)
        ):
            states = ", ".join(
                f"{n} {bad_nodes[n].state_text}" for n in job.nodes if n in bad_nodes
            )
            found.append(
                self._interruption(
                    job,
                    bad_nodes,
                    reason=f"node(s) of the running job unavailable: {states}",
                    state=job.state,
                    hint=FaultClass.NODE_LOST,
                )
            )
        elif job.held_after_failed_launch and job.restart_count > 0:
            # the attempt before the hold never started; the node it was launched on (shown
            # while its launch is torn down) was drained by slurmctld itself
            attempt = job.model_copy(update={"restart_count": job.restart_count - 1})
            launched_on = ", ".join(job.nodes) or "a node Slurm no longer shows"
            found.append(
                self._interruption(
                    attempt,
                    set(job.nodes),
                    reason=f"slurmctld held the job after its launch on {launched_on} failed "
                    f"(reason {job.state_reason}, restart {job.restart_count})",
                    state=None,
                    hint=FaultClass.NODE_LOST if job.nodes else None,
                )
            )
        elif (
            before is not None
            and before.state in RUNNING_JOB_STATES
            and job.restart_count > before.restart_count
        ):
            found.append(
                self._interruption(
                    before,
                    bad_nodes,
                    reason=f"slurmctld requeued the job (now {job.state.value}, "
                    f"reason {job.state_reason or 'none'}, restart {job.restart_count})",
                    state=None,
                    hint=FaultClass.NODE_LOST
                    if any(n in bad_nodes for n in before.nodes)
                    else None,
                )
            )
        return found

    async def poll_once(self) -> list[Interruption]:
        await self._scan_held()
        was_running = [j.job_id for j in self._last_jobs.values() if j.state in RUNNING_JOB_STATES]
        jobs = await self.scheduler.list_active_jobs(also=[*was_running, *self._requeued])
        nodes = await self.scheduler.list_unhealthy_nodes()
        track_drained_nodes(self.config.cluster.name, nodes)
        self.polls += 1
        reported: list[Interruption] = []
        for interruption in self.detect(jobs, nodes):
            try:
                await self.report(interruption)
            except Exception:  # reporting failed: keep it unreported, try next poll
                log.exception("cannot report interruption of job %s", interruption.job_id)
                continue
            self._reported.add(interruption.workflow_id)
            reported.append(interruption)
            log.info("reported %s: %s", interruption.workflow_id, interruption.reason)
        return reported

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.config.watcher.poll_interval_s
        failures = 0
        while not stop.is_set():
            self._kick.clear()  # a kick arriving during this poll triggers the next one
            polled_at = time.monotonic()
            try:
                await self.poll_once()
                record_watcher_poll(time.monotonic() - polled_at, ok=True)
                failures = 0
            except SchedulerError as exc:
                record_watcher_poll(time.monotonic() - polled_at, ok=False)
                failures += 1
                self.controller_unreachable()
                log.warning("scheduler poll failed (%d in a row): %s", failures, exc)
            except Exception:  # a bug, not a job's data (that is isolated per job): go on
                failures += 1
                log.exception("watcher poll failed (%d in a row)", failures)
            delay = interval if failures == 0 else min(30.0, interval * 2 ** min(failures, 4))
            stopper = asyncio.ensure_future(stop.wait())
            kicker = asyncio.ensure_future(self._kick.wait())
            await asyncio.wait(
                {stopper, kicker}, timeout=delay, return_when=asyncio.FIRST_COMPLETED
            )
            stopper.cancel()
            kicker.cancel()
            # a storm of kicks polls at most every MIN_POLL_GAP_S
            gap = MIN_POLL_GAP_S - (time.monotonic() - polled_at)
            if gap > 0 and not stop.is_set():
                await asyncio.sleep(gap)
