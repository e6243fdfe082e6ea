"""NodeRepairWorkflow: one per node resurrect drained; brings it back to service.

Started (signal-with-start of ``node_drained``, id ``node-repair/<cluster>/<node>``) by the
drain step for every node it drained. For each drain it waits the cool-down, runs the
health check (``repair.check_node``: the configured program, e.g. the node agent's
``agent check`` on that node), and resumes the node (``repair.resume_node``) only if it is
healthy and still drained by resurrect (reason prefix ``resurrect:``): a node an operator
drained meanwhile is left alone. A failed check is repeated after ``recheck_interval_s``,
``max_checks`` times in all, then the node is flagged for a hardware ticket. Probation: a
node drained again within ``probation_s`` of its return stays out and is flagged
(``repair.flag_node``). Its history (drains, checks, returns, exclusions) is the query
``node_state`` (``resurrect nodes``); the workflow lives on, continuing as new.

The same state is the node's lemon record (resurrect/lemons): the signal ``node_incident``
(a recovery implicated the node, with evidence from the node agent or Slurm, or only from
resurrect's probes) adds an incident (one per recovery, bounded: probe-only incidents leave
first) and upserts the node's score as the search attribute ``ResurrectLemonScore``. A node
a recovery drains for its lemon record (``NodeDrainReport.lemon``) is not returned after a
passing check: like a node failing probation, it stays out, flagged for a hardware ticket,
with the incidents behind it.

A drain also records the node as excluded from the drained job (the requeue after a drain
always excludes the drained nodes).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from resurrect.contracts.workflow_names import (
        NODE_DRAINED_SIGNAL,
        NODE_INCIDENT_SIGNAL,
        NODE_REPAIR_WORKFLOW,
        NODE_STATE_QUERY,
        OperatorActivity,
    )
    from resurrect.lemons.models import LemonRules, NodeIncident
    from resurrect.lemons.policy import describe
    from resurrect.lemons.score import lemon_score, out_of_service, weight
    from resurrect.operator.models import (
        NodeCheck,
        NodeDrainReport,
        NodeEvent,
        NodeEventKind,
        NodeFlag,
        NodeIncidentReport,
        NodeRepairState,
    )
    from resurrect.temporal.search_attributes import LEMON_SCORE
    from resurrect.workflows.retry import UNTIL_DONE_RETRY

MAX_EVENTS = 200
EVENTS_PER_RUN = 400


def _bounded(incidents: list[NodeIncident], rules: LemonRules) -> list[NodeIncident]:
    """The newest ``keep_incidents``, oldest first; beyond that the lightest leave first, so
    probe-only incidents (which a job can provoke) never push out independent ones."""
    if len(incidents) <= rules.keep_incidents:
        return sorted(incidents, key=lambda i: i.at)
    kept = sorted(incidents, key=lambda i: (weight(i.tier, rules), i.at))[-rules.keep_incidents :]
    return sorted(kept, key=lambda i: i.at)


@workflow.defn(name=NODE_REPAIR_WORKFLOW)
class NodeRepairWorkflow:
    @workflow.init
    def __init__(self, state: NodeRepairState) -> None:
        self._state = state
        self._events_this_run = 0

    # ------------------------------------------------------------------ signals/queries
    @workflow.signal(name=NODE_DRAINED_SIGNAL)
    def node_drained(self, report: NodeDrainReport) -> None:
        if report.kind == "excluded":
            self._state.exclusions.setdefault(report.job_id, workflow.now())
            self._event("excluded", f"excluded from job {report.job_id}", report)
            return
        if report.kind == "included":
            if self._state.exclusions.pop(report.job_id, None) is not None:
                self._event("included", f"no longer excluded from job {report.job_id}", report)
            return
        if self._state.drained_by(report.incident):
            return  # a drain step run again reports the same drain again
        # the requeue that follows a drain excludes the drained nodes from the job
        self._state.exclusions.setdefault(report.job_id, workflow.now())
        self._state.pending.append(report)

    @workflow.signal(name=NODE_INCIDENT_SIGNAL)
    def node_incident(self, report: NodeIncidentReport) -> None:
        """A recovery implicated this node: keep the incident (once per recovery) and
        publish the node's score."""
        state, rules = self._state, report.rules
        if any(i.incident == report.incident.incident for i in state.incidents):
            return  # a retried assessment reports the same incident again
        state.lemon_rules = rules
        state.incidents = _bounded([*state.incidents, report.incident], rules)
        self._events_this_run += 1
        score = lemon_score(
            state.node, state.incidents, out_of_service(state.events), workflow.now(), rules
        )
        workflow.upsert_search_attributes([LEMON_SCORE.value_set(score.score)])

    @workflow.query(name=NODE_STATE_QUERY)
    def node_state(self) -> NodeRepairState:
        return self._state

    # ------------------------------------------------------------------ helpers
    def _event(
        self, kind: NodeEventKind, detail: str, report: NodeDrainReport | None = None
    ) -> None:
        self._state.events.append(
            NodeEvent(
                at=workflow.now(),
                kind=kind,
                detail=detail,
                incident=report.incident if report else None,
                job_id=report.job_id if report else None,
            )
        )
        del self._state.events[:-MAX_EVENTS]
        self._events_this_run += 1

    async def _check(self) -> NodeCheck:
        timings = self._state.timings
        result: NodeCheck = await workflow.execute_activity(
            OperatorActivity.CHECK_NODE,
            self._state.node,
            result_type=NodeCheck,
            start_to_close_timeout=timedelta(seconds=timings.check_timeout_s + 30),
            retry_policy=UNTIL_DONE_RETRY,
        )
        return result

    async def _flag(self, why: str, report: NodeDrainReport | None) -> None:
        self._state.status = "flagged"
        self._state.flagged = True
        self._event("flagged", why, report)
        await workflow.execute_activity(
            OperatorActivity.FLAG_NODE,
            NodeFlag(
                cluster=self._state.cluster,
                node=self._state.node,
                why=why,
                events=self._state.events[-20:],
            ),
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=UNTIL_DONE_RETRY,
        )

    async def _repair(self, report: NodeDrainReport) -> None:
        """One drain: probation, cool-down, checks, resume."""
        state, timings = self._state, self._state.timings
        state.drains += 1
        self._event("drained", f"{report.fault_class}: {report.reason}", report)
        if state.flagged:
            return  # stays out until a person resumes it (and clears the flag)
        if report.lemon:
            await self._flag(self._lemon_why(), report)
            return
        if state.returned_at is not None and workflow.now() - state.returned_at < timedelta(
            seconds=timings.probation_s
        ):
            since = (workflow.now() - state.returned_at).total_seconds()
            await self._flag(
                f"failed again {since:.0f} s after its return to service (probation"
                f" {timings.probation_s:g} s): stays drained, open a hardware ticket",
                report,
            )
            return
        state.status = "cooling_down"
        await workflow.sleep(timedelta(seconds=timings.cool_down_s))
        for attempt in range(timings.max_checks):
            state.status = "checking"
            state.checks += 1
            check = await self._check()
            if not check.drained_by_resurrect:
                state.status = "left_alone" if check.drained else "in_service"
                self._event(
                    "not_ours",
                    "no longer drained by resurrect"
                    + (f" (drained: {check.reason})" if check.drained else ""),
                    report,
                )
                return
            if not check.healthy:
                state.status = "drained_unhealthy"
                self._event("check_failed", check.detail, report)
                if attempt + 1 < timings.max_checks:
                    await workflow.sleep(timedelta(seconds=timings.recheck_interval_s))
                continue
            self._event("check_passed", check.detail, report)
            detail: str = await workflow.execute_activity(
                OperatorActivity.RESUME_NODE,
                state.node,
                result_type=str,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=replace(
                    UNTIL_DONE_RETRY, non_retryable_error_types=["SchedulerRefused", "NodeNotFound"]
                ),
            )
            state.status = "in_service"
            state.returns += 1
            state.returned_at = workflow.now()
            self._event("returned", detail, report)
            return
        await self._flag(
            f"failed {timings.max_checks} health checks: stays drained, open a hardware ticket",
            report,
        )

    def _lemon_why(self) -> str:
        state = self._state
        found = (
            describe(
                lemon_score(
                    state.node,
                    state.incidents,
                    out_of_service(state.events),
                    workflow.now(),
                    state.lemon_rules,
                )
            )
            if state.lemon_rules is not None
            else f"{state.node} is a lemon"
        )
        return f"drained as a lemon node: stays drained, open a hardware ticket ({found})"

    # ------------------------------------------------------------------ run
    @workflow.run
    async def run(self, state: NodeRepairState) -> None:
        while True:
            await workflow.wait_condition(
                lambda: (
                    bool(self._state.pending)
                    or self._events_this_run >= EVENTS_PER_RUN
                    or workflow.info().is_continue_as_new_suggested()
                )
            )
            if self._state.pending:
                report = self._state.pending.pop(0)
                try:
                    await self._repair(report)
                except ActivityError as exc:  # a refused resume: the node stays as it is
                    self._state.status = "drained_unhealthy"
                    self._event("check_failed", f"return to service failed: {exc}", report)
                continue
            # between repairs: the drains still pending go along in the state
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(self._state)
