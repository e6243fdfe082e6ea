"""The activities of operator control: what the drain-budget and node-repair workflows call
(notifications, the node health check, the resume, flags). The clients of those workflows
are :mod:`resurrect.operator.budget_client` and :mod:`resurrect.operator.repair_client`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from temporalio import activity

from resurrect.config import ResurrectConfig
from resurrect.contracts import NodeInfo
from resurrect.contracts.workflow_names import (
    OperatorActivity,
)
from resurrect.errors import NodeNotFound, SchedulerError, SchedulerRefused, failure_of
from resurrect.operator.health_check import run_health_check
from resurrect.operator.models import (
    BudgetTripNotice,
    NodeCheck,
    NodeFlag,
    NodeRepairState,
)
from resurrect.operator.repair_client import node_state
from resurrect.scheduler.base import DRAIN_REASON_PREFIX, Scheduler

log = logging.getLogger(__name__)

REGISTRATION_POLL_S = 2.0
# A node back in service is given back to at most this many pending jobs it was excluded from.
MAX_JOBS_GIVEN_BACK = 64


class OperatorActivities:
    """What the budget and repair workflows (and the recovery's approval gate) call."""

    def __init__(
        self,
        scheduler: Scheduler,
        config: ResurrectConfig,
        repair_state: Callable[[str], Awaitable[NodeRepairState | None]] | None = None,
    ) -> None:
        """``repair_state``: a node's repair state (tests); by default its repair workflow's
        answer to a query."""
        self.scheduler = scheduler
        self.config = config
        self._repair_state = repair_state

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
        """Return ``node`` to service (refused unless resurrect drained it), and give it back
        to the pending jobs resurrect excluded it from (:meth:`_give_back`)."""
        try:
            mutation = await self.scheduler.resume_node(node)
        except (SchedulerRefused, NodeNotFound) as exc:
            raise failure_of(exc) from exc
        if not mutation.changed:
            return f"not resumed: {mutation.detail}"
        given = await self._give_back(node)
        if given:
            return f"{mutation.detail}; no longer excluded from pending job(s) {', '.join(given)}"
        return mutation.detail

    async def _give_back(self, node: str) -> list[str]:
        """The pending jobs resurrect excluded ``node`` from (its repair workflow's record)
        that get it back now that its health check passed: each job not held, still pending
        and still excluding it, at most :data:`MAX_JOBS_GIVEN_BACK`, the longest excluded
        first. Without this a job whose exclusions, with nodes out of service, leave it fewer
        nodes than it needs waits for ever (its next requeue would give them back, but a
        pending job has none). One job's failure is logged and the others go on."""
        excluded = await self._exclusions_of(node)
        given: list[str] = []
        for job_id in sorted(excluded, key=excluded.__getitem__)[:MAX_JOBS_GIVEN_BACK]:
            try:
                job = await self.scheduler.get_job(job_id)
                if job.held:  # a recovery or a person is acting on it: theirs to decide
                    continue
                mutation = await self.scheduler.give_back_nodes(job_id, [node])
            except SchedulerError as exc:
                log.warning("node %s not given back to job %s: %s", node, job_id, exc)
                continue
            if mutation.changed:
                given.append(job_id)
        return given

    async def _exclusions_of(self, node: str) -> dict[str, datetime]:
        """job id -> when resurrect excluded ``node`` from it, from the node's repair
        workflow (the one running this activity); {} when there is none."""
        if self._repair_state is not None:
            state = await self._repair_state(node)
        else:
            try:
                client = activity.client()
            except RuntimeError:  # not in an activity with a client: nothing recorded here
                return {}
            state = await node_state(client, self.config.cluster.name, node, self.config)
        return dict(state.exclusions) if state is not None else {}

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
