"""The follower itself: which jobs it follows, a look at each, and what it reports.

See the package's docstring (:mod:`sensors.log_follower`) for what it reads, how often,
and within which share; one file's reading is :mod:`sensors.log_follower.followed_file`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    Evidence,
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    SignalKind,
)
from resurrect.errors import SchedulerError
from resurrect.evidence_trust import match_job_nodes, names_a_node_the_attempt_lacks
from resurrect.job_notes import JobNotes
from resurrect.policy import resolve_job_policy
from resurrect.progress.hang_culprits import HangCulprits
from resurrect.progress.tracker import ProgressTracker
from resurrect.progress.watch import HangReport, ProgressWatch, straggler_evidence
from resurrect.rules.engine import LineScanner
from resurrect.scheduler.base import Scheduler
from resurrect.sensors.checkpoint_progress import CheckpointProgress
from resurrect.sensors.follower_share import (
    DEFAULT_SHARE,
    FollowerShare,
    LookBudget,
)
from resurrect.sensors.log_follower.followed_file import FollowedFile
from resurrect.sensors.poll_schedule import AdaptiveSchedule
from resurrect.sensors.report import ReportInterruption
from resurrect.stacks.collect import LocalRanks, RankAccess

log = logging.getLogger(__name__)

RankAccessFactory = Callable[[JobInfo], RankAccess]


def local_ranks(job: JobInfo, slurm_conf: Path | None = None) -> RankAccess:
    """The job's ranks on this machine (the local cluster: every node is here), of the
    cluster whose ``slurm_conf`` it is."""
    return LocalRanks(
        job.job_id,
        restart_count=job.restart_count,
        owner_uid=job.user_id,
        slurm_conf=str(slurm_conf) if slurm_conf is not None else None,
    )


MIN_CHECKPOINT_LOOK_S = 5.0
# Adaptive hang detection judges silences of a few step times: a save in progress must be
# seen within a second (a look reads the directory and its newest entries only).
ADAPTIVE_CHECKPOINT_LOOK_S = 1.0
MAX_REMEMBERED_JOBS = 10_000  # per-job memory across attempts is bounded
SKIP_NOTE_EVERY_S = 60.0  # a job that keeps falling behind gets one note a minute, with the sum

# Root causes after which the job cannot finish where it is.
INTERRUPTING_CLASSES = frozenset(
    {FaultClass.GPU_HARDWARE, FaultClass.NETWORK_FABRIC, FaultClass.NODE_LOST}
)


def hang_check_interval(hang_after_s: float) -> float:
    """How often the checkpoint directory is looked at for a job with this threshold."""
    return max(hang_after_s / 10, MIN_CHECKPOINT_LOOK_S)


@dataclass
class FollowedJob:
    job: JobInfo
    files: list[FollowedFile] = field(default_factory=list)
    reported: bool = False
    hang_after_s: float | None = None
    checkpoint: CheckpointProgress | None = None
    last_progress: float = field(default_factory=time.monotonic)
    progress: ProgressWatch | None = None  # adaptive hang detection (no hang_after_s set)
    looks: int = 0  # its files take turns going first
    skip_noted_at: float | None = None

    def close(self) -> None:
        for file in self.files:
            file.close()

    def checkpoint_moved(self) -> bool:
        """Did the checkpoint directory change since the last look (a save in progress is
        progress too)? Looks at most every :func:`hang_check_interval`."""
        return self.checkpoint is not None and self.checkpoint.changed()

    def checkpoint_changed_since(self, silent_s: float) -> bool:
        """One full look: was anything in the checkpoint directory written in the last
        ``silent_s`` seconds? (Asked only before calling the job hung.)"""
        return self.checkpoint is not None and self.checkpoint.changed_since(time.time() - silent_s)


class JobLogFollower:
    """Follows the output of running opted-in jobs and reports interrupting root causes."""

    def __init__(
        self,
        scheduler: Scheduler,
        config: ResurrectConfig,
        engine: LineScanner,
        report: ReportInterruption,
        *,
        interrupting: Iterable[FaultClass] = INTERRUPTING_CLASSES,
        rank_access: RankAccessFactory | None = None,
        adaptive: bool = True,
        share: FollowerShare = DEFAULT_SHARE,
    ) -> None:
        self.scheduler = scheduler
        self.config = config
        self.engine = engine
        self.report = report
        self.interrupting = frozenset(interrupting)
        self.min_confidence = config.watcher.log_trigger_min_confidence
        self.share = share  # what one look at one job may take
        self.jobs: dict[tuple[str, int], FollowedJob] = {}
        self.notes = JobNotes(log)
        conf = config.cluster.slurm_conf
        self.rank_access = rank_access or (lambda job: local_ranks(job, conf))
        self.hang_culprits = HangCulprits(
            config.watcher.hang_suspect_window_s,
            config.temporal.state_dir / "hang-culprits.json",
        )
        self.reported_at: dict[str, float] = {}  # job -> when its last interruption was sent
        # adaptive=False: every job at every poll (the baseline benchmarks compare against)
        self.adaptive = adaptive
        watcher = config.watcher
        self.schedule: AdaptiveSchedule[tuple[str, int]] = AdaptiveSchedule(
            fast_s=watcher.log_poll_interval_s,
            quiet_max_s=max(watcher.log_quiet_max_s, watcher.log_poll_interval_s),
            quiet_looks_per_s=watcher.log_quiet_looks_per_s,
        )

    async def refresh_jobs(self) -> None:
        """Follow newly started jobs, drop finished ones. One job whose data breaks this
        is noted and left out; the others are followed."""
        jobs = await self.scheduler.list_active_jobs()
        live: set[tuple[str, int]] = set()
        for job in jobs:
            if job.state is not JobState.RUNNING:
                continue
            key = (job.job_id, job.restart_count)
            try:
                if self._follow(job, key):
                    live.add(key)
            except Exception as exc:  # one job's bad data must not stop the others
                self.notes.failed(job.job_id, "starting to follow its output", exc)
        for key in list(self.jobs):
            if key not in live:
                self.jobs.pop(key).close()
                self.schedule.discard(key)
        now = time.monotonic()
        for key in live:
            self.schedule.add(key, now)

    def _follow(self, job: JobInfo, key: tuple[str, int]) -> bool:
        """Start following ``job`` if it is opted in; whether it is (followed)."""
        resolution = resolve_job_policy(job, self.config)
        for problem in resolution.problems:
            self.notes.note(job.job_id, problem)
        if not resolution.opted_in:
            return False
        if key in self.jobs:
            return True
        for note in job.notes:
            self.notes.note(job.job_id, note)
        paths = [p for p in dict.fromkeys([job.stdout_path, job.stderr_path]) if p]
        files = [FollowedFile(path, owner_uid=job.user_id) for path in paths]
        if job.restart_count > 0:
            # a requeued job may append to the same file: start at its current end, the
            # lines of the earlier attempt were already judged
            for followed in files:
                followed.skip_to_end()
        policy = resolution.policy
        adaptive = policy.hang_after_s is None and policy.progress.hang_detection
        checkpoint = None
        if policy.checkpoint_dir and (policy.hang_after_s is not None or adaptive):
            interval = (
                hang_check_interval(policy.hang_after_s)
                if policy.hang_after_s is not None
                else ADAPTIVE_CHECKPOINT_LOOK_S
            )
            # its first look (a full listing) happens in the first check, off the event loop
            checkpoint = CheckpointProgress(
                policy.checkpoint_dir, min_interval_s=interval, owner_uid=job.user_id
            )
        entry = FollowedJob(
            job=job, files=files, hang_after_s=policy.hang_after_s, checkpoint=checkpoint
        )
        if adaptive:
            entry.progress = ProgressWatch(
                policy.progress,
                ProgressTracker(time.monotonic()),
                self.rank_access(job),
                recovery_began_at=self.reported_at.get(job.job_id),
            )
        self.jobs[key] = entry
        log.info("following output of job %s attempt %s: %s", job.job_id, job.restart_count, paths)
        return True

    def scan_job(self, followed: FollowedJob) -> list[Evidence]:
        """Handle what ``followed`` printed since its last look, within one share of the
        follower (:mod:`sensors.follower_share`): its files take turns going first, and the
        lines a spent share leaves are handled at the job's next look."""
        budget = LookBudget(self.share)
        hits: list[Evidence] = []
        files = followed.files
        first = followed.looks % len(files) if files else 0
        followed.looks += 1
        for file in files[first:] + files[:first]:
            if budget.spent():
                break  # this file goes first at the next look
            now = time.monotonic()
            for number, raw in file.lines(budget):  # stops when the budget is spent
                if followed.progress is not None:
                    followed.progress.observe_line(raw, now)
                for evidence in self.engine.scan_line(
                    raw, kind=SignalKind.JOB_LOG, file=file.path, line=number
                ):
                    if (
                        evidence.role == "root"
                        and evidence.fault_class in self.interrupting
                        and (evidence.confidence or 0.0) >= self.min_confidence
                    ):
                        if names_a_node_the_attempt_lacks(evidence, followed.job.nodes):
                            self.notes.note(
                                followed.job.job_id,
                                f"not a fault of attempt {followed.job.restart_count} (on"
                                f" {','.join(followed.job.nodes)}): an earlier attempt's line"
                                f" {evidence.text[:160]!r}",
                            )
                            continue
                        hits.append(evidence)
            if file.refused:
                self.notes.note(followed.job.job_id, file.refused)
            self._note_skipped(followed, file, now)
            if file.consumed:
                followed.last_progress = now
            if followed.progress is not None and b"\r" in file.pending[-4096:]:
                # a progress bar redraws itself with carriage returns, no newline: its tail
                followed.progress.observe_line(file.pending[-4096:], now)
        return hits

    def _note_skipped(self, followed: FollowedJob, file: FollowedFile, now: float) -> None:
        """Say how much of ``file`` was passed over unread (at most once a minute a job)."""
        if not file.skipped:
            return
        if followed.skip_noted_at is not None and now - followed.skip_noted_at < SKIP_NOTE_EVERY_S:
            return
        followed.skip_noted_at = now
        self.notes.note(
            followed.job.job_id,
            f"{file.path}: {file.skipped} bytes of output skipped unread: more than"
            f" {self.share.max_behind} bytes were waiting (the job printed faster than its"
            f" share of the log follower, {self.share.describe()}), or the file held more"
            f" than {self.share.resume_from} bytes when following began; reading goes on"
            f" from its last {self.share.resume_from} bytes",
        )
        file.skipped = 0

    async def poll_once(self) -> list[Interruption]:
        """Scan what each followed job wrote since the last look; report what interrupts it.
        A job whose handling fails is noted and skipped; the others are served."""
        return await self._poll(list(self.jobs))

    async def poll_due(self) -> list[Interruption]:
        """Like :meth:`poll_once`, for the jobs whose look is due (:mod:`sensors.poll_schedule`)."""
        return await self._poll(self.schedule.due(time.monotonic()))

    async def _poll(self, keys: list[tuple[str, int]]) -> list[Interruption]:
        reported: list[Interruption] = []
        for key in keys:
            followed = self.jobs.get(key)
            if followed is None:
                continue
            if followed.reported:  # nothing more to say for this attempt: look rarely
                self.schedule.looked(key, time.monotonic(), changed=False)
                continue
            job_id, restart = key
            progress = followed.last_progress
            try:
                interruption = await self._check(job_id, restart, followed)
            except Exception as exc:  # one job's bad data must not stop the others
                self.notes.failed(job_id, "following its output", exc)
                continue
            finally:
                changed = followed.last_progress != progress
                self.schedule.looked(key, time.monotonic(), changed=changed)
                if followed.checkpoint is not None and followed.checkpoint.refused:
                    self.notes.note(job_id, followed.checkpoint.refused)  # (rate-limited)
            if interruption is None:
                continue
            try:
                await self.report(interruption)
            except Exception:  # keep it unreported: the next poll tries again
                log.exception("cannot report interruption of job %s", job_id)
                continue
            followed.reported = True
            self.reported_at[job_id] = time.monotonic()
            while len(self.reported_at) > MAX_REMEMBERED_JOBS:  # forget the oldest
                del self.reported_at[next(iter(self.reported_at))]
            reported.append(interruption)
        return reported

    async def _check(self, job_id: str, restart: int, followed: FollowedJob) -> Interruption | None:
        """What ``followed`` printed since the last look, as an interruption if it is one."""
        hits = await asyncio.to_thread(self.scan_job, followed)
        if hits:
            first = hits[0]
            hosts = [h.host for h in hits if h.host]
            suspects, _ = match_job_nodes(hosts, followed.job.nodes)
            fault = first.fault_class
            reason = (
                f"{fault.value if fault else 'fault'} in job output"
                f" ({first.rule}): {first.text[:200]}"
            )
            evidence = hits[:20]
        elif followed.progress is not None:
            report = await asyncio.to_thread(self._progress_hang, followed)
            if report is not None:
                suspects, fault, reason = [], FaultClass.JOB_HANG, report.reason
                evidence = [*report.evidence, *self._implicate(report, followed.job)]
            else:
                decision = followed.progress.check_straggler(time.monotonic())
                if decision is None:
                    return None
                if decision.action == "notify":
                    log.warning("job %s: straggler: %s", job_id, decision.note)
                    return None
                node = decision.finding.node
                suspects, _ = match_job_nodes([node] if node else [], followed.job.nodes)
                fault, reason = FaultClass.JOB_STRAGGLER, decision.note
                evidence = [
                    *straggler_evidence(decision),
                    *followed.progress.gpu_evidence([decision.finding.rank]),
                ]
        else:
            silent_s = await asyncio.to_thread(self._hung_for, followed)
            if silent_s is None:
                return None
            suspects, fault, evidence = [], FaultClass.JOB_HANG, []
            reason = (
                f"no output and no checkpoint activity for {silent_s:.0f} s"
                f" (hang_after_s {followed.hang_after_s:.0f})"
            )
        return Interruption(
            cluster=self.config.cluster.name,
            job_id=job_id,
            restart_count=restart,
            source="log_tail",
            reason=reason,
            observed_at=datetime.now(UTC),
            job_state=JobState.RUNNING,
            nodes=list(followed.job.nodes),
            suspect_nodes=suspects,
            fault_hint=fault,
            evidence=evidence,
            output_marks=[f.began for f in followed.files if f.began is not None],
        )

    def _progress_hang(self, followed: FollowedJob) -> HangReport | None:
        """Adaptive hang detection: checkpoint activity (looked at once a second) is progress;
        a suspicion is confirmed from the ranks' stacks. Samples who waits, for stragglers."""
        assert followed.progress is not None
        now = time.monotonic()
        if followed.checkpoint_moved():  # rate-limited by CheckpointProgress
            followed.progress.checkpoint_activity(now)
        followed.progress.sample(now)
        return followed.progress.check(now)

    def _implicate(self, report: HangReport, job: JobInfo) -> list[Evidence]:
        """Remember which of the job's nodes caused hangs; each culprit node's record (the
        jobs whose hangs it caused, within the window) goes with the report: the recovery
        flags a node implicated in hangs of different jobs as a suspect (a hint, not a
        drain). A culprit name that is not one of the job's nodes is noted, not recorded."""
        found, notes = self.hang_culprits.implicate(
            job.job_id, report.culprit_nodes, job.nodes, time.time()
        )
        for note in notes:
            self.notes.note(job.job_id, note)
        return found

    def _hung_for(self, followed: FollowedJob) -> float | None:
        """Seconds without output or checkpoint activity, once past the job's threshold.

        Between cheap looks at the checkpoint directory (at most every
        :func:`hang_check_interval`), nothing is scanned; one full look confirms before a
        job is called hung."""
        if followed.hang_after_s is None:
            return None
        now = time.monotonic()
        if followed.checkpoint_moved():
            followed.last_progress = now
        silent = now - followed.last_progress
        if silent < followed.hang_after_s:
            return None
        if followed.checkpoint_changed_since(silent):
            followed.last_progress = now
            return None
        return silent

    async def run(self, stop: asyncio.Event) -> None:
        refresh_every = self.config.watcher.poll_interval_s
        next_refresh = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_refresh:
                try:
                    await self.refresh_jobs()
                except SchedulerError as exc:
                    log.warning("log follower cannot list jobs: %s", exc)
                except Exception:  # a bug, not a job's data: keep serving, say so loudly
                    log.exception("log follower: refreshing the followed jobs failed")
                next_refresh = now + refresh_every
            try:
                await (self.poll_due() if self.adaptive else self.poll_once())
            except Exception:
                log.exception("log follower: a poll failed")
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.config.watcher.log_poll_interval_s)
            except TimeoutError:
                pass
        for followed in self.jobs.values():
            followed.close()
