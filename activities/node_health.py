"""Activities of the node health workflow: turning a node fault into job recoveries.

``node_health.report_node_fault`` lists the jobs running on the node, keeps those opted in
(:func:`resurrect.policy.job_policy`), and reports an :class:`Interruption` for each through
:func:`sensors.report.report_interruption` (signal-with-start of the job attempt's
RecoveryWorkflow, so a report that Slurm or the log follower also makes lands in the same
workflow). It is idempotent: repeating it signals the same recoveries again.

Register on the worker::

    node_health = NodeHealthActivities(scheduler, client, config)
    Worker(..., workflows=[NodeHealthWorkflow], activities=[node_health.report_node_fault])
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from temporalio import activity
from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import ACTIVE_JOB_STATES, Interruption, JobInfo, JobPolicy
from resurrect.contracts.node_health import (
    REPORT_NODE_FAULT_ACTIVITY,
    NodeFaultReport,
    NodeFaultResult,
)
from resurrect.job_notes import JobNotes
from resurrect.scheduler.base import Scheduler

log = logging.getLogger(__name__)

ReportFn = Callable[..., Awaitable[str]]
PolicyFn = Callable[[JobInfo, ResurrectConfig], JobPolicy | None]


def _default_report() -> ReportFn:
    from resurrect.sensors.report import report_interruption

    return report_interruption


def _default_policy() -> PolicyFn:
    from resurrect.policy import job_policy

    return job_policy


class NodeHealthActivities:
    """Holds the scheduler, the Temporal client and the configuration the activity needs."""

    def __init__(
        self,
        scheduler: Scheduler,
        client: Client,
        config: ResurrectConfig,
        *,
        report: ReportFn | None = None,
        policy: PolicyFn | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._client = client
        self._config = config
        self._report = report or _default_report()
        self._policy = policy or _default_policy()
        self._notes = JobNotes(log)

    @activity.defn(name=REPORT_NODE_FAULT_ACTIVITY)
    async def report_node_fault(self, report: NodeFaultReport) -> NodeFaultResult:
        """Start or signal the recovery of every opted-in job running on ``report.node``."""
        result = NodeFaultResult(node=report.node)
        jobs = await self._scheduler.list_active_jobs()  # running ones, not the whole queue
        for job in jobs:
            if report.node not in job.nodes or job.state not in ACTIVE_JOB_STATES:
                continue
            result.jobs_on_node.append(job.job_id)
            try:
                opted_in = self._policy(job, self._config) is not None
            except Exception as exc:  # one job's bad data must not hide its neighbours
                self._notes.failed(job.job_id, "reading its policy", exc)
                result.skipped.append(f"job {job.job_id}: policy unreadable, not opted in")
                continue
            if not opted_in:
                result.skipped.append(f"job {job.job_id}: not opted in")
                continue
            interruption = Interruption(
                cluster=report.cluster,
                job_id=job.job_id,
                # the attempt on the node: a requeue's teardown still runs the one before
                restart_count=job.attempt_on_nodes,
                source="node_agent",
                reason=report.reason,
                observed_at=report.observed_at,
                job_state=job.state,
                nodes=list(job.nodes),
                suspect_nodes=[report.node],
                fault_hint=report.fault_class,
                evidence=list(report.evidence),
            )
            workflow_id = await self._report(
                self._client, interruption, task_queue=self._config.temporal.task_queue
            )
            result.reported.append(workflow_id)
            log.info(
                "node %s (%s): reported job %s as %s",
                report.node,
                report.fault_class,
                job.job_id,
                workflow_id,
            )
        if not result.jobs_on_node:
            log.info("node %s (%s): no running jobs there", report.node, report.fault_class)
        return result
