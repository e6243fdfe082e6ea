"""Verification of every checkpoint under a root, with per-file parallelism and progress."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from resurrect.checkpoint.findings import CheckLimited, Findings, Progress
from resurrect.checkpoint.framework_checks import check_frameworks
from resurrect.checkpoint.layout import Candidate, Layout, RootUnreadable, discover
from resurrect.checkpoint.limits import DEFAULT_LIMITS, VerifyLimits
from resurrect.checkpoint.manifest import default_workers
from resurrect.checkpoint.owner import Owner, confined_root
from resurrect.checkpoint.verify_one import DEFAULT_RECENT_S, FileTask, Level, Plan, plan_checks
from resurrect.contracts import CheckpointCandidate, CheckpointVerdict

__all__ = ["Level", "VerifiedRoot", "verify_layout", "verify_root"]

_PROGRESS_EVERY_S = 2.0


class _Cancelled(Exception):
    """Raised inside workers once the verification was abandoned."""


class _Meter:
    """Counts the bytes and files the workers have verified (thread-safe); stops them at
    their next block once cancelled or past the deadline."""

    def __init__(self, total: int, deadline: float | None = None) -> None:
        self.total = total
        self.done = 0
        self.files_done = 0
        self.deadline = deadline
        self._lock = threading.Lock()
        self._cancelled = threading.Event()

    def add(self, n: int) -> None:
        if self._cancelled.is_set():
            raise _Cancelled
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise CheckLimited("time budget used up")
        with self._lock:
            self.done += n

    def cancel(self) -> None:
        """Make every worker stop at its next block."""
        self._cancelled.set()

    def file_finished(self) -> None:
        with self._lock:
            self.files_done += 1

    def line(self, files_total: int) -> str:
        with self._lock:
            done, files = self.done, self.files_done
        pct = 100.0 * done / self.total if self.total else 100.0
        return (
            f"verified {files}/{files_total} file(s), {done >> 20} of {self.total >> 20} MiB "
            f"({pct:.0f}%)"
        )


def _run_tasks(
    plans: list[Plan], workers: int, progress: Progress | None, deadline: float | None = None
) -> None:
    """Run every plan's file tasks on a thread pool; record problems into the findings.

    ``progress`` is only ever called from the calling thread (a Temporal activity heartbeat
    needs the activity's context), every few seconds while the workers run. An exception it
    raises (e.g. the activity was cancelled) stops the verification and propagates.
    """
    jobs: list[tuple[Findings, FileTask]] = [(p.findings, t) for p in plans for t in p.tasks]
    if not jobs:
        return
    meter = _Meter(sum(t.size for _, t in jobs), deadline)

    def run_one(task: FileTask) -> tuple[bool, str] | None:
        """None: intact; (True, why): damage; (False, why): cut short by a bound."""
        try:
            problem = task.run(meter.add)
            return None if problem is None else (True, problem)
        except CheckLimited as exc:
            return False, f"{task.label}: {exc}"
        except Exception as exc:  # a verifier bug must not crash the whole verdict
            return True, f"{task.label}: check failed ({type(exc).__name__}: {exc})"
        finally:
            meter.file_finished()

    # Largest first, so one big file does not start last and dominate the wall time.
    jobs.sort(key=lambda j: -j[1].size)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ckpt-verify")
    try:
        # Each task runs in a copy of this context: it carries the root anchor (fsutil).
        futures: dict[Future[tuple[bool, str] | None], Findings] = {
            pool.submit(contextvars.copy_context().run, run_one, task): findings
            for findings, task in jobs
        }
        pending: set[Future[tuple[bool, str] | None]] = set(futures)
        while pending:
            _done, pending = wait(pending, timeout=_PROGRESS_EVERY_S)
            if progress is not None:
                progress(meter.line(len(jobs)))
    except BaseException:
        meter.cancel()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for fut, findings in futures.items():
        outcome = fut.result()
        if outcome is None:
            continue
        damaged, why = outcome
        if damaged:
            findings.damage(why)
        else:
            findings.limit(why)


class VerifiedRoot:
    """A layout together with the findings of each of its candidates (oldest first)."""

    def __init__(self, layout: Layout, plans: list[Plan]) -> None:
        self.layout = layout
        self.plans = plans

    def newest_valid(self) -> Plan | None:
        """The newest intact checkpoint, if any."""
        for plan in reversed(self.plans):
            if plan.findings.valid:
                return plan
        return None

    def to_verdict(self, note: str = "") -> CheckpointVerdict:
        """The public contract: candidates newest first."""
        best = self.newest_valid()
        candidates = [
            CheckpointCandidate(
                path=str(p.candidate.path),
                step=p.candidate.step,
                valid=p.findings.valid,
                reason=p.findings.reason(),
                judged=p.findings.judged,
            )
            for p in reversed(self.plans)
        ]
        notes = list(self.layout.problems)
        if note:
            notes.append(note)
        if best is not None and not best.findings.judged:
            notes.append(f"{best.candidate.name} is loaded unjudged: {best.findings.unjudged[0]}")
        if best is None:
            notes.append(
                "no intact checkpoint found" if self.plans else "no checkpoints found under root"
            )
        return CheckpointVerdict(
            root=str(self.layout.root),
            verified=True,
            latest_valid=str(best.candidate.path) if best else None,
            resume_step=best.candidate.step if best else None,
            candidates=candidates,
            note="; ".join(notes),
        )


def _plan_safely(
    cand: Candidate, level: Level, now: float, recent_s: float, limits: VerifyLimits
) -> Plan:
    """plan_checks, but an unexpected error marks the candidate instead of crashing."""
    try:
        return plan_checks(cand, level, now=now, recent_s=recent_s, limits=limits)
    except Exception as exc:
        findings = Findings()
        findings.damage(f"check failed ({type(exc).__name__}: {exc})")
        return Plan(cand, findings, [])


def verify_layout(
    layout: Layout,
    level: Level = "quick",
    *,
    progress: Progress | None = None,
    workers: int | None = None,
    recent_s: float = DEFAULT_RECENT_S,
    limits: VerifyLimits = DEFAULT_LIMITS,
) -> VerifiedRoot:
    """Verify every candidate of an already discovered layout (inside confined_root)."""
    now = time.time()
    budget = limits.time_budget_s
    deadline = None if budget is None else time.monotonic() + budget
    plans = [_plan_safely(c, level, now, recent_s, limits) for c in layout.candidates]
    check_frameworks(layout, plans)
    if progress is not None:
        progress(f"{layout.root}: {len(plans)} checkpoint(s), level {level}")
    _run_tasks(plans, workers or default_workers(), progress, deadline)
    if progress is not None:
        valid = sum(p.findings.valid for p in plans)
        progress(f"{layout.root}: done, {valid}/{len(plans)} intact")
    return VerifiedRoot(layout, plans)


def verify_root(
    root: Path | str,
    level: Level = "quick",
    progress: Progress | None = None,
    *,
    workers: int | None = None,
    recent_s: float = DEFAULT_RECENT_S,
    limits: VerifyLimits = DEFAULT_LIMITS,
    owner: Owner | None = None,
) -> CheckpointVerdict:
    """Verify every checkpoint under ``root`` and name the newest intact one.

    Never raises for a bad root: a missing or unreadable root, or one that is not
    ``owner``'s (resurrect.checkpoint.owner), gives ``verified=False`` with the reason in
    ``note``. Nothing is modified.
    """
    return verify_confined(
        root,
        level,
        VerifiedRoot.to_verdict,
        progress=progress,
        workers=workers,
        recent_s=recent_s,
        limits=limits,
        owner=owner,
    )


def verify_confined(
    root: Path | str,
    level: Level,
    then: Callable[[VerifiedRoot], CheckpointVerdict],
    *,
    progress: Progress | None,
    workers: int | None,
    recent_s: float,
    limits: VerifyLimits,
    owner: Owner | None,
) -> CheckpointVerdict:
    """Verify every checkpoint under ``root`` inside :func:`confined_root` and make the
    verdict with ``then``, still confined. A missing or unreadable root, or one that is not
    ``owner``'s, gives ``verified=False`` with the reason in ``note``."""
    root_path = Path(root)
    try:
        with confined_root(root_path, owner):
            layout = discover(root_path)
            verified = verify_layout(
                layout, level, progress=progress, workers=workers, recent_s=recent_s, limits=limits
            )
            return then(verified)
    except RootUnreadable as exc:
        return CheckpointVerdict(root=str(root_path), verified=False, note=str(exc))
