"""NodeHealthWorkflow: one per node (id ``node-health/<cluster>/<node>``), fed by its agent.

The agent signal-with-starts it with ``heartbeat`` (every ~2 s), ``findings`` (de-duplicated
rule evidence) and ``agent_stopped`` (a deliberate stop). The workflow holds the node's
latest health (query ``health``) and acts in two cases, through the activity
``node_health.report_node_fault`` (which starts or signals the recovery of every opted-in
job running on the node):

* a **root finding** (e.g. Xid 79, a lost GPU, a recovery action "reset"): the node is
  faulty now, whatever Slurm believes;
* **heartbeat silence** longer than ``silence_threshold_s`` while the agent had not said it
  was stopping: the node is suspected lost (``node.lost``), seconds after it happened and
  long before Slurm's SlurmdTimeout; Slurm's own NODE_FAIL later corroborates it in the
  recovery workflow.

With a liveness collector (:mod:`sensors.liveness`), heartbeats do not reach the workflow:
the collector forwards one when the node is first heard (flag ``watched_by_collector``:
the workflow then keeps no silence timer of its own) and signals ``node_silent`` when the
node falls silent, which is reported like the workflow's own silence verdict. A heartbeat
without the flag (the agent fell back because the collector is down) arms the timer again.

The same (rule, GPU) is reported at most once per ``report_dedup_s``; silence is reported
once per silent spell. When the silence timer fires much later than asked (the control plane
itself was down, so heartbeats may simply not have been delivered), the agent gets one more
threshold before the node is declared lost: an outage of resurrect never drains the fleet.
History stays bounded: after ``max_signals_per_run`` signals the
workflow continues as new, carrying its state.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from resurrect.contracts import Evidence, FaultClass, SignalKind
    from resurrect.contracts.node_health import (
        AGENT_STOPPED_SIGNAL,
        FINDINGS_SIGNAL,
        HEALTH_QUERY,
        HEARTBEAT_SIGNAL,
        NODE_HEALTH_WORKFLOW,
        NODE_SILENT_SIGNAL,
        REPORT_NODE_FAULT_ACTIVITY,
        AgentStopped,
        NodeFaultReport,
        NodeFaultResult,
        NodeFindings,
        NodeHealth,
        NodeHealthInput,
        NodeHeartbeat,
        NodeSilent,
        NodeStatus,
    )
    from resurrect.workflows.retry import UNTIL_DONE_RETRY

MAX_FINDINGS_KEPT = 64
# A silence timer that fires this much later than asked means the control plane itself
# stalled (server or worker down): the agent gets a fresh threshold instead of a report.
STALL_SLACK_S = 3.0
MAX_REPORTED_KEPT = 32
# An agent back in contact sends its first heartbeats both to the collector and directly
# (it has not heard the collector's acknowledgement yet); the direct copy can arrive after
# the collector's forwarded one. Such a stale direct beat (sent no later than the last
# forwarded one) no longer takes the watch back from the collector: it armed a silence timer
# that then reported a false silence, and left the collector's next real one ignored.
STALE_DIRECT_BEAT_KEEPS_COLLECTOR = "stale-direct-beat-keeps-collector"
# A silence reported after the agent was heard again (the collector's verdict and the agent's
# return in one workflow task) no longer marks the node silent: it stayed so while it beat,
# and the collector's next silence verdict was ignored.
SILENCE_AFTER_RETURN_KEEPS_HEALTH = "silence-after-return-keeps-health"
REPORT_TIMEOUT = timedelta(seconds=60)
# The report is retried without a maximum (a controller or Temporal outage can last): the
# workflow must never end over it, or the node's state (findings, heartbeat watch) is lost.
REPORT_RETRY = UNTIL_DONE_RETRY


def _finding_key(evidence: Evidence) -> str:
    return (
        f"{evidence.gpu or evidence.fields.get('pci') or 'node'}|{evidence.rule or evidence.text}"
    )


@workflow.defn(name=NODE_HEALTH_WORKFLOW)
class NodeHealthWorkflow:
    """Holds one node's health; reports faults and silence to the jobs running there."""

    @workflow.init
    def __init__(self, params: NodeHealthInput) -> None:
        self._params = params
        self._health = params.carried or NodeHealth(cluster=params.cluster, node=params.node)
        self._signals = 0
        self._beats = 0  # heartbeats received in this run (wakes the silence timer)
        self._beats_at_wait = 0
        self._threshold = timedelta(seconds=params.silence_threshold_s)
        last = self._health.last_heartbeat_at
        self._deadline: datetime | None = (
            last + self._threshold
            if last is not None and not self._health.watched_by_collector
            else None
        )
        self._pending_roots: list[Evidence] = []
        self._collector_silence: NodeSilent | None = None
        # when the agent sent the last heartbeat the collector forwarded (this run)
        self._forwarded_sent_at: datetime | None = None

    # -- signals and query ---------------------------------------------------------------

    @workflow.signal(name=HEARTBEAT_SIGNAL)
    def heartbeat(self, beat: NodeHeartbeat) -> None:
        self._signals += 1
        health = self._health
        if beat.watched_by_collector:
            self._forwarded_sent_at = beat.sent_at
        elif self._stale_direct(beat) and workflow.patched(STALE_DIRECT_BEAT_KEEPS_COLLECTOR):
            return
        if beat.seq < health.last_seq or health.status == "stopped":
            # a new agent process (restart, node reboot): old findings are history
            health.findings = []
        health.last_seq = beat.seq
        health.last_heartbeat_at = workflow.now()
        health.gpus = beat.gpus
        health.nvml = beat.nvml
        health.silent_since = None
        self._threshold = timedelta(seconds=beat.silence_threshold_s)  # the agent's setting
        # the collector watches silence for a forwarded heartbeat; a direct one arms the timer
        health.watched_by_collector = beat.watched_by_collector
        self._deadline = None if beat.watched_by_collector else workflow.now() + self._threshold
        self._beats += 1
        self._forget_old_findings()
        health.status = self._status_from_findings()

    def _stale_direct(self, beat: NodeHeartbeat) -> bool:
        """A direct heartbeat the agent sent no later than one the collector already
        forwarded, while the collector watches the node: the agent had not yet heard the
        collector answer, and the collector's watch stands."""
        forwarded = self._forwarded_sent_at
        return (
            self._health.watched_by_collector
            and forwarded is not None
            and beat.sent_at <= forwarded
        )

    @workflow.signal(name=FINDINGS_SIGNAL)
    def findings(self, found: NodeFindings) -> None:
        self._signals += 1
        health = self._health
        latest = {_finding_key(item): item for item in health.findings}
        for item in found.evidence:
            latest[_finding_key(item)] = item
            if item.role == "root":
                self._pending_roots.append(item)
        health.findings = list(latest.values())[-MAX_FINDINGS_KEPT:]
        if health.status not in ("silent", "stopped"):
            health.status = self._status_from_findings()

    @workflow.signal(name=NODE_SILENT_SIGNAL)
    def node_silent(self, silent: NodeSilent) -> None:
        self._signals += 1
        if self._health.status in ("silent", "stopped"):
            return
        if not self._health.watched_by_collector:
            return  # the agent heartbeats the workflow directly: its own timer decides
        self._health.last_heartbeat_at = silent.last_heartbeat_at
        self._health.last_seq = max(self._health.last_seq, silent.last_seq)
        self._collector_silence = silent

    @workflow.signal(name=AGENT_STOPPED_SIGNAL)
    def agent_stopped(self, stopped: AgentStopped) -> None:
        self._signals += 1
        self._health.status = "stopped"

    @workflow.query(name=HEALTH_QUERY)
    def health(self) -> NodeHealth:
        return self._health

    # -- main loop -----------------------------------------------------------------------

    @workflow.run
    async def run(self, params: NodeHealthInput) -> NodeHealth:
        while True:
            if self._pending_roots:
                await self._report_roots()
                continue
            if self._collector_silence is not None:
                silent, self._collector_silence = self._collector_silence, None
                await self._report_silence(silent.last_heartbeat_at)
                continue
            if self._signals >= params.max_signals_per_run and workflow.all_handlers_finished():
                threshold = self._threshold.total_seconds()
                workflow.continue_as_new(
                    params.model_copy(
                        update={"carried": self._health, "silence_threshold_s": threshold}
                    )
                )
            self._beats_at_wait = beats = self._beats
            watching = self._health.status not in ("silent", "stopped", "unknown")
            deadline = self._deadline
            if not watching or deadline is None:
                await workflow.wait_condition(self._should_wake)
                continue
            remaining = (deadline - workflow.now()).total_seconds()
            if remaining > 0:
                try:
                    await workflow.wait_condition(
                        self._should_wake, timeout=timedelta(seconds=remaining)
                    )
                    continue
                except TimeoutError:
                    pass
            if self._beats != beats or self._health.status in ("silent", "stopped"):
                continue
            if (workflow.now() - deadline).total_seconds() > STALL_SLACK_S:
                # We woke far later than asked: the control plane (server or worker) was not
                # running, so the agent's heartbeats may have failed too. Give it a fresh
                # threshold rather than declaring every node lost after an outage.
                self._deadline = workflow.now() + self._threshold
                self._health.stall_graces += 1
                continue
            await self._report_silence(self._health.last_heartbeat_at or deadline)

    def _should_wake(self) -> bool:
        """A root finding to report, a heartbeat, or time to continue as new."""
        return (
            bool(self._pending_roots)
            or self._collector_silence is not None
            or self._beats != self._beats_at_wait
            or self._signals >= self._params.max_signals_per_run
        )

    def _forget_old_findings(self) -> None:
        """Findings not repeated for two de-dup windows are over (the agent re-sends a
        condition that persists, such as a lost GPU, once per window)."""
        keep_for = timedelta(seconds=max(60.0, 2 * self._params.report_dedup_s))
        oldest = workflow.now() - keep_for
        self._health.findings = [
            item
            for item in self._health.findings
            if item.observed_at is None or item.observed_at >= oldest
        ]

    def _status_from_findings(self) -> NodeStatus:
        findings = self._health.findings
        if any(item.role == "root" for item in findings):
            return "faulty"
        if findings:
            return "degraded"
        return "healthy"

    async def _report_roots(self) -> None:
        now = workflow.now()
        window = timedelta(seconds=self._params.report_dedup_s)
        fresh: list[Evidence] = []
        for item in self._pending_roots:
            key = _finding_key(item)
            last = self._health.reported_at.get(key)
            if last is None or now - last >= window:
                self._health.reported_at[key] = now
                fresh.append(item)
        self._pending_roots = []
        if len(self._health.reported_at) > MAX_REPORTED_KEPT:
            recent = sorted(self._health.reported_at.items(), key=lambda kv: kv[1])
            self._health.reported_at = dict(recent[-MAX_REPORTED_KEPT:])
        if not fresh:
            return
        primary = fresh[0]
        reason = f"node agent: {primary.rule} on {self._params.node}" + (
            f" GPU {primary.gpu}" if primary.gpu else ""
        )
        await self._report(
            primary.fault_class or FaultClass.GPU_HARDWARE, reason, fresh, observed_at=now
        )

    async def _report_silence(self, last: datetime) -> None:
        now = workflow.now()
        health = self._health
        heard = health.last_heartbeat_at
        back = heard is not None and heard > last  # heard again since the silence began
        if not (back and workflow.patched(SILENCE_AFTER_RETURN_KEEPS_HEALTH)):
            health.status = "silent"
            health.silent_since = last
        silent_for = (now - last).total_seconds()
        evidence = Evidence(
            kind=SignalKind.HEARTBEAT,
            text=(
                f"node agent on {self._params.node} silent for {silent_for:.1f}s "
                f"(threshold {self._params.silence_threshold_s:.1f}s, last heartbeat "
                f"seq {health.last_seq} at {last.isoformat()})"
            ),
            rule="node_agent.heartbeat_silence",
            role="root",
            fault_class=FaultClass.NODE_LOST,
            host=self._params.node,
            observed_at=now,
            fields={"silent_s": f"{silent_for:.1f}", "last_seq": str(health.last_seq)},
        )
        reason = f"node agent on {self._params.node} silent for {silent_for:.0f}s"
        await self._report(FaultClass.NODE_LOST, reason, [evidence], observed_at=now)

    async def _report(
        self, fault: FaultClass, reason: str, evidence: list[Evidence], *, observed_at: datetime
    ) -> None:
        report = NodeFaultReport(
            cluster=self._params.cluster,
            node=self._params.node,
            fault_class=fault,
            reason=reason,
            observed_at=observed_at,
            evidence=evidence,
        )
        try:
            result = await workflow.execute_activity(
                REPORT_NODE_FAULT_ACTIVITY,
                report,
                result_type=NodeFaultResult,
                start_to_close_timeout=REPORT_TIMEOUT,
                retry_policy=REPORT_RETRY,
            )
        except ActivityError as err:
            # a failure that retrying cannot mend: keep watching the node, state intact
            workflow.logger.error("%s: cannot report %s: %s", self._params.node, fault, err.cause)
            return
        health = self._health
        health.faults_reported += 1
        health.reported_jobs = [*health.reported_jobs, *result.reported][-MAX_REPORTED_KEPT:]
