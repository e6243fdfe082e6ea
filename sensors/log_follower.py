"""The job-log follower: reads what running opted-in jobs print, as they print it.

For every running opted-in job it follows the job's stdout/stderr files (paths from the
scheduler; new jobs are picked up as they start, finished ones dropped), reads only the
bytes appended since the last look (polling every ``watcher.log_poll_interval_s``), and
feeds complete lines to the rule engine. A root-cause match of a class that means the job
cannot finish in place (a lost GPU while the other ranks wait in a collective, a failed
link, a lost node) reports an interruption at once, so the recovery can cancel the stuck
job instead of waiting out its NCCL timeout.

Truncation (the file got shorter) and rotation (another inode at the path) restart reading
from the top. Partial lines wait for their end, bounded by ``MAX_PENDING`` bytes; a longer
line is cut and scanned by its head. Bytes are untrusted: invalid UTF-8 is replaced.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from resurrect.config import ResurrectConfig
from resurrect.contracts import Evidence, FaultClass, Interruption, JobInfo, JobState, SignalKind
from resurrect.errors import SchedulerError
from resurrect.planning import match_job_nodes
from resurrect.policy import resolve_job_policy
from resurrect.scheduler.base import Scheduler
from resurrect.telemetry.record import record_follower_read

log = logging.getLogger(__name__)

Reporter = Callable[[Interruption], Awaitable[object]]

MAX_READ = 4 << 20  # bytes read per file per poll
MAX_PENDING = 256 << 10  # a partial line longer than this is cut

# Root causes after which the job cannot finish where it is.
INTERRUPTING_CLASSES = frozenset(
    {FaultClass.GPU_HARDWARE, FaultClass.NETWORK_FABRIC, FaultClass.NODE_LOST}
)


class LineScanner(Protocol):
    def scan_line(
        self,
        text: str | bytes,
        *,
        kind: SignalKind = ...,
        file: str | None = ...,
        line: int | None = ...,
        host: str | None = ...,
    ) -> list[Evidence]: ...


@dataclass
class FollowedFile:
    """Where we are in one file."""

    path: str
    inode: int | None = None
    offset: int = 0
    line_number: int = 0
    pending: bytes = b""

    def read_new_lines(self) -> list[tuple[int, bytes]]:
        try:
            with open(self.path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                if self.inode != stat.st_ino or stat.st_size < self.offset:
                    # new file, rotated, or truncated: start from the top
                    self.inode, self.offset, self.line_number, self.pending = stat.st_ino, 0, 0, b""
                if stat.st_size == self.offset:
                    return []
                handle.seek(self.offset)
                data = handle.read(min(MAX_READ, stat.st_size - self.offset))
                record_follower_read(len(data), time.time() - stat.st_mtime)
        except OSError:
            return []
        self.offset += len(data)
        data = self.pending + data
        pieces = data.split(b"\n")
        self.pending = pieces.pop()
        if len(self.pending) > MAX_PENDING:
            pieces.append(self.pending[:MAX_PENDING])
            self.pending = b""
        lines = []
        for piece in pieces:
            self.line_number += 1
            lines.append((self.line_number, piece))
        return lines


@dataclass
class FollowedJob:
    job: JobInfo
    files: list[FollowedFile] = field(default_factory=list)
    reported: bool = False
    hang_after_s: float | None = None
    checkpoint_dir: str | None = None
    last_progress: float = field(default_factory=time.monotonic)
    checkpoint_signature: int | None = None

    def checkpoint_moved(self) -> bool:
        """Did the checkpoint directory change (a save in progress is progress too)?

        Compares names, sizes and mtimes of the directory's entries and of the entries of
        its newest subdirectory (where a save in progress writes), not timestamps alone:
        two changes within the file system's timestamp granularity still differ."""
        if not self.checkpoint_dir:
            return False
        try:
            top = [
                (e.name, e.stat().st_mtime_ns, e.stat().st_size, e.is_dir())
                for e in os.scandir(self.checkpoint_dir)
            ]
            dirs = [entry for entry in top if entry[3]]
            inner: list[tuple[str, int, int, bool]] = []
            if dirs:
                newest = max(dirs, key=lambda entry: (entry[1], entry[0]))[0]
                path = os.path.join(self.checkpoint_dir, newest)
                inner = [
                    (e.name, e.stat().st_mtime_ns, e.stat().st_size, False)
                    for e in os.scandir(path)
                ]
        except OSError:
            return False
        signature = hash((tuple(sorted(top)), tuple(sorted(inner))))
        moved = self.checkpoint_signature is not None and signature != self.checkpoint_signature
        self.checkpoint_signature = signature
        return moved


class JobLogFollower:
    """Follows the output of running opted-in jobs and reports interrupting root causes."""

    def __init__(
        self,
        scheduler: Scheduler,
        config: ResurrectConfig,
        engine: LineScanner,
        report: Reporter,
        *,
        interrupting: Iterable[FaultClass] = INTERRUPTING_CLASSES,
    ) -> None:
        self.scheduler = scheduler
        self.config = config
        self.engine = engine
        self.report = report
        self.interrupting = frozenset(interrupting)
        self.min_confidence = config.watcher.log_trigger_min_confidence
        self.jobs: dict[tuple[str, int], FollowedJob] = {}

    async def refresh_jobs(self) -> None:
        """Follow newly started jobs, drop finished ones."""
        jobs = await self.scheduler.list_jobs()
        live: set[tuple[str, int]] = set()
        for job in jobs:
            if job.state is not JobState.RUNNING:
                continue
            resolution = resolve_job_policy(job, self.config)
            if not resolution.opted_in:
                continue
            key = (job.job_id, job.restart_count)
            live.add(key)
            if key not in self.jobs:
                paths = [p for p in dict.fromkeys([job.stdout_path, job.stderr_path]) if p]
                files = [FollowedFile(path) for path in paths]
                if job.restart_count > 0:
                    # a requeued job may append to the same file: start at its current end,
                    # the lines of the earlier attempt were already judged
                    for followed in files:
                        while followed.read_new_lines():
                            pass
                entry = FollowedJob(
                    job=job,
                    files=files,
                    hang_after_s=resolution.policy.hang_after_s,
                    checkpoint_dir=resolution.policy.checkpoint_dir,
                )
                entry.checkpoint_moved()  # remember where the checkpoints stand
                self.jobs[key] = entry
                log.info(
                    "following output of job %s attempt %s: %s",
                    job.job_id,
                    job.restart_count,
                    paths,
                )
        for key in list(self.jobs):
            if key not in live:
                del self.jobs[key]

    def scan_job(self, followed: FollowedJob) -> list[Evidence]:
        hits: list[Evidence] = []
        for file in followed.files:
            lines = file.read_new_lines()
            if lines:
                followed.last_progress = time.monotonic()
            for number, raw in lines:
                for evidence in self.engine.scan_line(
                    raw, kind=SignalKind.JOB_LOG, file=file.path, line=number
                ):
                    if (
                        evidence.role == "root"
                        and evidence.fault_class in self.interrupting
                        and (evidence.confidence or 0.0) >= self.min_confidence
                    ):
                        hits.append(evidence)
        return hits

    async def poll_once(self) -> list[Interruption]:
        """Scan what each followed job wrote since the last look; report what interrupts it."""
        reported: list[Interruption] = []
        for (job_id, restart), followed in list(self.jobs.items()):
            if followed.reported:
                continue
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
            else:
                silent_s = await asyncio.to_thread(self._hung_for, followed)
                if silent_s is None:
                    continue
                suspects, fault, evidence = [], FaultClass.JOB_HANG, []
                reason = (
                    f"no output and no checkpoint activity for {silent_s:.0f} s"
                    f" (hang_after_s {followed.hang_after_s:.0f})"
                )
            interruption = Interruption(
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
            )
            try:
                await self.report(interruption)
            except Exception:  # keep it unreported: the next poll tries again
                log.exception("cannot report interruption of job %s", job_id)
                continue
            followed.reported = True
            reported.append(interruption)
        return reported

    def _hung_for(self, followed: FollowedJob) -> float | None:
        """Seconds without output or checkpoint activity, once past the job's threshold."""
        if followed.hang_after_s is None:
            return None
        now = time.monotonic()
        if followed.checkpoint_moved():
            followed.last_progress = now
        silent = now - followed.last_progress
        return silent if silent >= followed.hang_after_s else None

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
                next_refresh = now + refresh_every
            await self.poll_once()
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.config.watcher.log_poll_interval_s)
            except TimeoutError:
                pass
