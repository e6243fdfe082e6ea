"""The activities of operator control: what the drain-budget and node-repair workflows call
(notifications, the node health check, the resume, flags). The clients of those workflows
are :mod:`resurrect.operator.budget_client` and :mod:`resurrect.operator.repair_client`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from temporalio import activity

from resurrect.config import ResurrectConfig
from resurrect.contracts import NodeInfo
from resurrect.contracts.workflow_names import (
    OperatorActivity,
)
from resurrect.errors import NodeNotFound, SchedulerRefused, failure_of
from resurrect.operator.health_check import run_health_check
from resurrect.operator.models import (
    BudgetTripNotice,
    NodeCheck,
    NodeFlag,
)
from resurrect.scheduler.base import DRAIN_REASON_PREFIX, Scheduler

log = logging.getLogger(__name__)

REGISTRATION_POLL_S = 2.0


class OperatorActivities:
    """What the budget and repair workflows (and the recovery's approval gate) call."""

    def __init__(self, scheduler: Scheduler, config: ResurrectConfig) -> None:
        self.scheduler = scheduler
        self.config = config

    def all(self) -> list[Callable[..., Any]]:
        return [self.notify, self.check_node, self.resume_node, self.flag_node]

    def _notify(self, record: dict[str, object], message: str, level: int) -> None:
        from resurrect.activities.steps import append_notification

        log.log(level, "%s", message)
        append_notification(self.config, {**record, "message": message})

    @activity.defn(name=OperatorActivity.NOTIFY)
    async def notify(self, notice: BudgetTripNotice) -> None:
        """The drain budget tripped: tell operators (once per trip)."""
        message = (
            f"drain budget of cluster {notice.cluster} tripped (trip {notice.trip}):"
            f" not draining {', '.join(notice.denied)} for job {notice.job_id};"
            f" {'; '.join(notice.reasons)}. See `resurrect budget`."
        )
        record: dict[str, object] = {
            "time": notice.at.isoformat(),
            "severity": "critical",
            "kind": "drain_budget_tripped",
            "cluster": notice.cluster,
            "workflow_id": notice.workflow_id,
            "job_id": notice.job_id,
        }
        await asyncio.to_thread(self._notify, record, message, logging.CRITICAL)

    @activity.defn(name=OperatorActivity.CHECK_NODE)
    async def check_node(self, node: str) -> NodeCheck:
        """Is ``node`` still drained by resurrect, does Slurm hear its slurmd, and does its
        health check pass? A node whose slurmd has not registered again (NOT_RESPONDING) is
        not returned: its registration reports the steps it still holds (an attempt cut off
        with it), which slurmctld ends only on a node it keeps out; returned before that, the
        node can be given the requeued job whose old step it still holds (Slurm's "Duplicate
        jobid": the node drained by Slurm, the job held after a failed launch)."""
        try:
            info = await self.scheduler.get_node(node)
        except NodeNotFound as exc:
            raise failure_of(exc) from exc
        ours = info.drained and info.reason.startswith(DRAIN_REASON_PREFIX)
        check = NodeCheck(
            node=node, drained_by_resurrect=ours, drained=info.drained, reason=info.reason
        )
        if not ours:
            return check
        try:
            registered = await self._registered(info)
        except NodeNotFound as exc:
            raise failure_of(exc) from exc
        if not registered:
            wait = self.config.repair.registration_wait_s
            return check.model_copy(
                update={
                    "detail": f"Slurm does not hear its slurmd (NOT_RESPONDING after {wait:g} s)"
                }
            )
        argv = self.config.isolation.health_check_argv
        if not argv:
            return check.model_copy(
                update={"detail": "no health check configured (isolation.health_check_argv)"}
            )
        verdict = await run_health_check(argv, node, self.config.repair.check_timeout_s)
        return check.model_copy(update={"healthy": verdict.healthy, "detail": verdict.detail})

    async def _registered(self, info: NodeInfo) -> bool:
        """Whether Slurm hears the node's slurmd, waiting up to ``repair.registration_wait_s``
        (read every 2 s) for one that has just come back to register."""
        deadline = time.monotonic() + self.config.repair.registration_wait_s
        while "NOT_RESPONDING" in info.flags:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(REGISTRATION_POLL_S, self.config.repair.registration_wait_s))
            info = await self.scheduler.get_node(info.name)
        return True

    @activity.defn(name=OperatorActivity.RESUME_NODE)
    async def resume_node(self, node: str) -> str:
        """Return ``node`` to service (refused unless resurrect drained it)."""
        try:
            mutation = await self.scheduler.resume_node(node)
        except (SchedulerRefused, NodeNotFound) as exc:
            raise failure_of(exc) from exc
        return mutation.detail if mutation.changed else f"not resumed: {mutation.detail}"

    @activity.defn(name=OperatorActivity.FLAG_NODE)
    async def flag_node(self, flag: NodeFlag) -> None:
        """A node for a hardware ticket: a critical notification with its recent history."""
        message = f"node {flag.node} of {flag.cluster} flagged for a hardware ticket: {flag.why}"
        record: dict[str, object] = {
            "time": datetime.now(UTC).isoformat(),
            "severity": "critical",
            "kind": "node_flagged",
            "cluster": flag.cluster,
            "node": flag.node,
            "history": [e.model_dump(mode="json") for e in flag.events],
        }
        await asyncio.to_thread(self._notify, record, message, logging.CRITICAL)
