"""The built-in recovery activities.

Each activity is a method of :class:`RecoveryActivities`, which holds its dependencies (the
scheduler, the configuration, a Temporal client), so tests can build one with a fake
scheduler and call the methods directly. Every mutating activity is idempotent: it checks
the current state first (draining a drained node, requeueing a job that was already
requeued, are no-ops) and honours ``dry_run`` (observe mode) by reporting what it would do.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    AttributeRequest,
    ChargedRestartsRequest,
    CheckpointVerdict,
    Diagnosis,
    DrainRequest,
    DrainResult,
    Evidence,
    EvidenceBundle,
    Interruption,
    JobInfo,
    JobState,
    MutationResult,
    NotifyRequest,
    RequeueRequest,
    SignalKind,
    VerifyCheckpointRequest,
    WaitRunningRequest,
    WaitRunningResult,
)
from resurrect.errors import JobNotFound, NodeNotFound, SchedulerError, SchedulerRefused
from resurrect.log_reading import read_tail_lines
from resurrect.policy import resolve_job_policy
from resurrect.scheduler.base import DRAIN_REASON_PREFIX, Scheduler
from resurrect.scheduler_evidence import combine, scheduler_diagnosis, scheduler_evidence
from workflows.names import Activity

log = logging.getLogger(__name__)

SAFE_ID_CHARS = frozenset("0123456789_")


def _permanent(exc: SchedulerError) -> ApplicationError:
    return ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True)


class RecoveryActivities:
    """The recovery steps, bound to one scheduler and configuration."""

    def __init__(
        self,
        scheduler: Scheduler,
        config: ResurrectConfig,
        client: Client | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.config = config
        self.client = client
        self._engine: object | None = None

    def all(self) -> list[Callable[..., Any]]:
        """Every activity of this object, for Worker(activities=...)."""
        return [
            self.gather_evidence,
            self.attribute,
            self.charged_restarts,
            self.drain_nodes,
            self.verify_checkpoint,
            self.requeue_job,
            self.wait_running,
            self.notify,
        ]

    # ------------------------------------------------------------------ evidence
    @activity.defn(name=Activity.GATHER_EVIDENCE)
    async def gather_evidence(self, interruption: Interruption) -> EvidenceBundle:
        try:
            job = await self.scheduler.get_job(interruption.job_id)
        except JobNotFound as exc:
            raise _permanent(exc) from exc
        nodes = [
            node
            for node in await self.scheduler.list_nodes()
            if node.name in set(job.nodes) | set(interruption.nodes)
        ]
        resolution = resolve_job_policy(job, self.config)
        for problem in resolution.problems:
            log.warning("%s", problem)
        mode = resolution.policy.mode or self.config.mode
        return EvidenceBundle(
            interruption=interruption,
            job=job,
            nodes=nodes,
            policy=resolution.policy,
            policy_source=resolution.source,
            policy_problems=resolution.problems,
            mode=mode,
            wait_running_timeout_s=self.config.recovery.wait_running_timeout_s,
            activity_timeout_s=self.config.recovery.activity_timeout_s,
            checkpoint_level=self.config.recovery.checkpoint_level,
        )

    def _rules_engine(self) -> object:
        if self._engine is None:
            from resurrect.rules import load_engine

            self._engine = load_engine(self.config.rules.extra_packs)
        return self._engine

    def _log_evidence(self, job: JobInfo) -> list[Evidence]:
        engine = self._rules_engine()
        found: list[Evidence] = []
        paths = [p for p in dict.fromkeys([job.stdout_path, job.stderr_path]) if p]
        for path in paths:
            for number, line in read_tail_lines(Path(path), self.config.watcher.log_tail_bytes):
                found.extend(
                    engine.scan_line(line, kind=SignalKind.JOB_LOG, file=path, line=number)  # type: ignore[attr-defined]
                )
        return found

    @activity.defn(name=Activity.ATTRIBUTE)
    async def attribute(self, request: AttributeRequest) -> Diagnosis:
        from resurrect.rules import attribute as attribute_evidence

        bundle = request.bundle
        log_found = await asyncio.to_thread(self._log_evidence, bundle.job)
        log_found.extend(e for e in request.reported if e.kind is not SignalKind.SCHEDULER_STATE)
        log_diagnosis = attribute_evidence(log_found) if log_found else None
        sched = scheduler_diagnosis(
            scheduler_evidence(bundle.interruption, bundle.job, bundle.nodes)
        )
        return combine(log_diagnosis, sched)

    @activity.defn(name=Activity.CHARGED_RESTARTS)
    async def charged_restarts(self, request: ChargedRestartsRequest) -> int:
        """How many earlier recoveries of this job were charged to its restart budget."""
        if self.client is None:
            return 0
        if not set(request.job_id) <= SAFE_ID_CHARS:
            raise ApplicationError(f"bad job id {request.job_id!r}", non_retryable=True)
        query = (
            f"ResurrectCluster = '{request.cluster}' AND ResurrectJobId = '{request.job_id}'"
            f" AND ResurrectBudgetCharged = true AND WorkflowId != '{request.current_workflow_id}'"
        )
        count = await self.client.count_workflows(query)
        return int(count.count)

    # ------------------------------------------------------------------ isolation
    async def _drain_budget(self, requested: Sequence[str]) -> tuple[set[str], int]:
        nodes = await self.scheduler.list_nodes()
        ours = {n.name for n in nodes if n.drained and n.reason.startswith(DRAIN_REASON_PREFIX)}
        budget = max(
            self.config.isolation.min_drain_budget,
            math.floor(self.config.isolation.max_drain_fraction * len(nodes)),
        )
        return ours, budget

    @activity.defn(name=Activity.DRAIN_NODES)
    async def drain_nodes(self, request: DrainRequest) -> DrainResult:
        result = DrainResult()
        already_ours, budget = await self._drain_budget(request.nodes)
        in_use = len(already_ours)
        reason = f"{DRAIN_REASON_PREFIX} {request.reason} [{request.incident}]"
        for name in request.nodes:
            if name not in already_ours and in_use >= budget:
                result.refused.append(name)
                result.notes.append(
                    f"not draining {name}: blast-radius budget of {budget} drained nodes reached"
                )
                continue
            if request.dry_run:
                result.results.append(
                    MutationResult(
                        target=name,
                        operation="drain",
                        changed=False,
                        detail=f"would drain {name}: {reason}",
                    )
                )
                continue
            try:
                mutation = await self.scheduler.drain_node(name, reason)
            except NodeNotFound as exc:
                result.notes.append(f"cannot drain {name}: {exc}")
                continue
            result.results.append(mutation)
            result.drained.append(name)
            if name not in already_ours:
                in_use += 1
        return result

    # ------------------------------------------------------------------ checkpoint
    @activity.defn(name=Activity.VERIFY_CHECKPOINT)
    async def verify_checkpoint(self, request: VerifyCheckpointRequest) -> CheckpointVerdict:
        root_text = request.policy.checkpoint_dir
        if not root_text:
            return CheckpointVerdict(
                root=None,
                verified=False,
                note="no checkpoint_dir in the job's policy: not verified",
            )
        root = Path(root_text)
        if not root.is_absolute() and request.job.work_dir:
            root = Path(request.job.work_dir) / root
        from resurrect.checkpoint import prepare_resume

        def progress(message: str) -> None:
            activity.heartbeat(message)

        verdict: CheckpointVerdict = await asyncio.to_thread(
            prepare_resume, root, level=request.level, act=not request.dry_run, progress=progress
        )
        return verdict

    # ------------------------------------------------------------------ restart
    @activity.defn(name=Activity.REQUEUE_JOB)
    async def requeue_job(self, request: RequeueRequest) -> MutationResult:
        try:
            job = await self.scheduler.get_job(request.job_id)
        except JobNotFound as exc:
            raise _permanent(exc) from exc
        excluded = ", ".join(request.exclude_nodes) or "no nodes"
        already = (
            job.restart_count > request.failed_restart_count
            and job.state in (JobState.PENDING, JobState.RUNNING)
            and not job.held
            and set(request.exclude_nodes) <= set(job.excluded_nodes)
        )
        if already:
            return MutationResult(
                target=request.job_id,
                operation="requeue",
                changed=False,
                detail=f"job {job.job_id} already requeued (restart {job.restart_count}),"
                f" excluding {excluded}",
            )
        if request.dry_run:
            return MutationResult(
                target=request.job_id,
                operation="requeue",
                changed=False,
                detail=f"would requeue job {job.job_id} ({job.state.value}) excluding {excluded}",
            )
        try:
            return await self.scheduler.requeue_excluding(request.job_id, request.exclude_nodes)
        except (JobNotFound, SchedulerRefused) as exc:
            raise _permanent(exc) from exc

    @activity.defn(name=Activity.WAIT_RUNNING)
    async def wait_running(self, request: WaitRunningRequest) -> WaitRunningResult:
        deadline = time.monotonic() + request.timeout_s
        last: JobInfo | None = None
        while time.monotonic() < deadline:
            try:
                last = await self.scheduler.get_job(request.job_id)
            except JobNotFound as exc:
                raise _permanent(exc) from exc
            except SchedulerError as exc:
                activity.heartbeat(f"scheduler: {exc}")
                await asyncio.sleep(request.poll_interval_s)
                continue
            activity.heartbeat(f"job {last.job_id} {last.state.value}")
            if last.state in (JobState.RUNNING, JobState.COMPLETING, JobState.COMPLETED):
                bad = sorted(set(last.nodes) & set(request.exclude_nodes))
                note = f"job {last.job_id} {last.state.value} on {','.join(last.nodes)}"
                if bad:
                    note += f" - WARNING: on excluded node(s) {','.join(bad)}"
                return WaitRunningResult(running=not bad, job=last, note=note)
            if last.state not in (JobState.PENDING, JobState.REQUEUED):
                return WaitRunningResult(
                    running=False,
                    job=last,
                    note=f"job {last.job_id} ended {last.state.value} before running",
                )
            await asyncio.sleep(request.poll_interval_s)
        return WaitRunningResult(
            running=False,
            job=last,
            note=f"job {request.job_id} not running after {request.timeout_s:.0f} s",
        )

    @activity.defn(name=Activity.NOTIFY)
    async def notify(self, request: NotifyRequest) -> MutationResult:
        """Record a notification for people: a log line and a JSON line in the state dir."""
        record = {
            "time": datetime.now(UTC).isoformat(),
            "workflow_id": request.workflow_id,
            "job_id": request.job.job_id,
            "user": request.job.user,
            "recipients": request.policy.notify,
            "message": request.message,
            "dry_run": request.dry_run,
        }
        log.warning(
            "recovery %s: job %s needs attention: %s",
            request.workflow_id,
            request.job.job_id,
            request.message,
        )
        state_dir = self.config.temporal.state_dir
        await asyncio.to_thread(_append_json_line, state_dir / "notifications.jsonl", record)
        return MutationResult(
            target=request.job.job_id, operation="notify", changed=True, detail=request.message
        )


def _append_json_line(path: Path, record: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
