"""The activities every recovery runs before its plan: evidence, attribution, budget, plans.

They are methods of :class:`RecoveryActivities`, which holds their dependencies (the
scheduler, the configuration, a Temporal client, the checked plans), so tests can build one
with a fake scheduler and call the methods directly. None of them changes anything; the
plan steps that do live in :mod:`activities.steps`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    AttributeRequest,
    ChargedRestartsRequest,
    Diagnosis,
    Evidence,
    EvidenceBundle,
    Interruption,
    JobInfo,
    SignalKind,
)
from resurrect.errors import JobNotFound, SchedulerError
from resurrect.log_reading import read_tail_lines
from resurrect.plans.models import ResolvedPlan
from resurrect.policy import resolve_job_policy
from resurrect.rules import RuleEngine, load_engine
from resurrect.rules import attribute as attribute_evidence
from resurrect.scheduler.base import Scheduler
from resurrect.scheduler_evidence import combine, scheduler_diagnosis, scheduler_evidence
from resurrect.workflows.names import Activity

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
        plans: Sequence[ResolvedPlan] = (),
    ) -> None:
        self.scheduler = scheduler
        self.config = config
        self.client = client
        self.plans = list(plans)
        self._engine: RuleEngine | None = None

    def all(self) -> list[Callable[..., Any]]:
        """Every activity of this object, for Worker(activities=...)."""
        return [
            self.gather_evidence,
            self.attribute,
            self.charged_restarts,
            self.recovery_plans,
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

    def _rules_engine(self) -> RuleEngine:
        if self._engine is None:
            self._engine = load_engine(self.config.rules.extra_packs)
        return self._engine

    def _log_evidence(self, job: JobInfo) -> list[Evidence]:
        engine = self._rules_engine()
        found: list[Evidence] = []
        paths = [p for p in dict.fromkeys([job.stdout_path, job.stderr_path]) if p]
        for path in paths:
            for number, line in read_tail_lines(Path(path), self.config.watcher.log_tail_bytes):
                found.extend(
                    engine.scan_line(line, kind=SignalKind.JOB_LOG, file=path, line=number)
                )
        return found

    @activity.defn(name=Activity.ATTRIBUTE)
    async def attribute(self, request: AttributeRequest) -> Diagnosis:
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

    @activity.defn(name=Activity.RECOVERY_PLANS)
    async def recovery_plans(self) -> list[ResolvedPlan]:
        """The plans this worker checked at start, in match order (recorded in history)."""
        return list(self.plans)
