"""Attribution from what the scheduler knows: job end state, node states, sensor hints.

Turns scheduler facts into :class:`Evidence` and combines them with the log diagnosis:
a specific root cause found in the logs (an Xid on a node, an IB link error, an OOM) is more
precise than "NODE_FAIL" and wins, while the scheduler supplies culprit nodes the logs could
not name; a time limit or preemption is a scheduler fact no log line overrides.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from resurrect.contracts import (
    DEFAULT_ACTION,
    FAILED_JOB_STATES,
    HARD_DOWN_NODE_STATES,
    Diagnosis,
    Evidence,
    EvidenceSource,
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    NodeInfo,
    RecoveryAction,
    SignalKind,
)
from resurrect.evidence_trust import (
    NODE_STATE_RULE,
    proposed_action,
    restart_action,
    short_name,
    slurm_marked,
)

SRUN_TOOK_STEP_DOWN = "slurm.srun_took_step_down"
"""srun ending its own step (a task failed, a launch failed): the STEP ... CANCELLED lines
after it are its, no person's."""

STATE_CLASS: dict[JobState, FaultClass] = {
    JobState.NODE_FAIL: FaultClass.NODE_LOST,
    JobState.BOOT_FAIL: FaultClass.NODE_LOST,
    JobState.TIMEOUT: FaultClass.JOB_TIME_LIMIT,
    JobState.DEADLINE: FaultClass.JOB_TIME_LIMIT,
    JobState.PREEMPTED: FaultClass.JOB_PREEMPTED,
    JobState.OUT_OF_MEMORY: FaultClass.MEMORY_HOST_OOM,
    JobState.CANCELLED: FaultClass.JOB_CANCELLED,
}

# Who vouches for a sensor's hint, by the sensor that reported it: the log follower only
# repeats what the job printed, so its hints are job output.
SENSOR_SOURCE: dict[str, EvidenceSource] = {
    "log_tail": "job_output",
    "node_agent": "node_agent",
    "slurm_watcher": "scheduler",
}

# Scheduler facts that no log line overrides.
AUTHORITATIVE = frozenset({FaultClass.JOB_TIME_LIMIT, FaultClass.JOB_PREEMPTED})
# A log diagnosis less sure than this yields to a scheduler-observed node loss (a peer's
# "connection closed" is what every rank prints when a node dies).
WEAK_LOG_CONFIDENCE = 0.5
# Log classes too vague to beat a scheduler-observed node loss.
WEAK_LOG_CLASSES = frozenset(
    {
        FaultClass.UNKNOWN,
        FaultClass.COLLECTIVE_TIMEOUT,
        FaultClass.PROCESS_CRASH,
        FaultClass.JOB_HANG,
    }
)


def scheduler_evidence(
    interruption: Interruption,
    job: JobInfo,
    nodes: Sequence[NodeInfo],
    lasting: Collection[str] | None = None,
) -> list[Evidence]:
    """Evidence from job and node states, plus the hint of the sensor that reported.
    ``lasting``: the nodes unavailable without being down that the recovery's reads showed
    so across the grace (:func:`~resurrect.evidence_trust.slurm_marked`); any other such
    node is only diagnostic. None: every unavailable node may be root evidence."""
    found: list[Evidence] = []
    job_class = STATE_CLASS.get(interruption.job_state or job.state) or STATE_CLASS.get(job.state)
    if job_class is not None:
        state = interruption.job_state or job.state
        found.append(
            Evidence(
                kind=SignalKind.SCHEDULER_STATE,
                text=f"job {job.job_id} state {state.value} ({job.state_reason or 'no reason'})",
                rule="scheduler.job_state",
                role="root",
                fault_class=job_class,
            )
        )
    job_nodes = set(job.nodes) | set(interruption.nodes)
    unavailable = [n for n in nodes if n.name in job_nodes and n.unavailable]
    marked = slurm_marked(unavailable, lasting)
    # A node that is DOWN, or that a sensor saw fail, is strong evidence; one that is only
    # NOT_RESPONDING (e.g. every node for a moment after slurmctld restarts) is weak, and
    # names a culprit only when nothing stronger does, and only once Slurm marks it.
    strong = {
        n.name
        for n in unavailable
        if n.state in HARD_DOWN_NODE_STATES or n.name in interruption.suspect_nodes
    }
    for node in unavailable:
        root = short_name(node.name) in marked and (not strong or node.name in strong)
        found.append(
            Evidence(
                kind=SignalKind.SCHEDULER_STATE,
                text=f"node {node.name} {node.state_text} ({node.reason or 'no reason'})",
                rule=NODE_STATE_RULE,
                role="root" if root else "diagnostic",
                fault_class=FaultClass.NODE_LOST,
                host=node.name,
            )
        )
    hint_source = SENSOR_SOURCE.get(interruption.source, "sensor")
    if interruption.fault_hint is not None and interruption.suspect_nodes:
        for node_name in interruption.suspect_nodes:
            found.append(
                Evidence(
                    kind=SignalKind.HEARTBEAT
                    if interruption.fault_hint is FaultClass.NODE_LOST
                    else SignalKind.SCHEDULER_STATE,
                    text=f"{interruption.source}: {interruption.reason}",
                    rule=f"sensor.{interruption.source}",
                    role="root",
                    fault_class=interruption.fault_hint,
                    host=node_name,
                    source=hint_source,
                )
            )
    if interruption.fault_hint is FaultClass.JOB_HANG and not interruption.suspect_nodes:
        found.append(
            Evidence(
                kind=SignalKind.SCHEDULER_STATE,
                text=f"{interruption.source}: {interruption.reason}",
                rule=f"sensor.{interruption.source}.hang",
                role="root",
                fault_class=FaultClass.JOB_HANG,
                source=hint_source,
            )
        )
    return found


def cancel_claims_checked(found: Sequence[Evidence], state: JobState | None) -> list[Evidence]:
    """``found``, with each root claim of a person's cancel read from output (not from Slurm)
    demoted to a cascade when Slurm says the job ended otherwise (FAILED, NODE_FAIL, ...).

    slurmstepd prints ``*** STEP n ON host CANCELLED AT ... ***`` too when srun takes a step
    down after one task failed (``--kill-on-bad-exit``), and a launcher prints the SIGTERM it
    got on the way down: only Slurm's own job state says a person cancelled the job. While
    the job is still COMPLETING (a node whose slurmd died holds it there) Slurm has not said
    yet; then a step's cancel line is demoted only when srun's first take-down of that step
    (``_step_signal: Terminating StepId=n``, a failed task launch) came before it in the same
    file.
    """
    if state not in FAILED_JOB_STATES and state is not JobState.COMPLETING:
        return list(found)
    taken_down: dict[tuple[str | None, str], int] = {}
    for e in found:
        if e.rule == SRUN_TOOK_STEP_DOWN and "step" in e.fields:
            step, line = (e.file, e.fields["step"]), e.line or 0
            taken_down[step] = min(line, taken_down.get(step, line))

    def disproved(e: Evidence) -> bool:
        if state in FAILED_JOB_STATES:
            return True
        # still completing (its end not yet Slurm's word): a step's cancel that srun's own
        # take-down of that step came before is no person's
        ended = taken_down.get((e.file, e.fields.get("job", "")))
        return ended is not None and ended < (e.line or 0)

    return [
        e.model_copy(update={"role": "cascade"})
        if e.fault_class is FaultClass.JOB_CANCELLED
        and e.role == "root"
        and e.kind is not SignalKind.SCHEDULER_STATE
        and disproved(e)
        else e
        for e in found
    ]


def scheduler_diagnosis(evidence: Sequence[Evidence]) -> Diagnosis | None:
    """A diagnosis from scheduler evidence alone, or None when it says nothing."""
    if not evidence:
        return None
    roots = [e for e in evidence if e.role == "root"]
    if not roots:
        return None
    ranked = sorted(roots, key=lambda e: _precedence(e.fault_class))
    fault = ranked[0].fault_class or FaultClass.UNKNOWN
    hosts = sorted({e.host for e in roots if e.host and e.fault_class is fault})
    confidence = 0.9 if hosts or fault in AUTHORITATIVE else 0.7
    action, _ = proposed_action(fault, hosts, confidence)
    return Diagnosis(
        fault_class=fault,
        action=action,
        confidence=confidence,
        culprit_hosts=hosts,
        evidence=[e for e in evidence if e.fault_class is fault],
        summary=f"scheduler: {fault.value}" + (f" on {', '.join(hosts)}" if hosts else ""),
    )


def _precedence(fault: FaultClass | None) -> int:
    order = [
        FaultClass.JOB_CANCELLED,
        FaultClass.JOB_TIME_LIMIT,
        FaultClass.JOB_PREEMPTED,
        FaultClass.MEMORY_HOST_OOM,
        FaultClass.NODE_LOST,
        FaultClass.JOB_HANG,
    ]
    return order.index(fault) if fault in order else len(order)


def combine(log: Diagnosis | None, scheduler: Diagnosis | None) -> Diagnosis:
    """One diagnosis from the log's and the scheduler's."""
    if scheduler is None and log is None:
        return Diagnosis(
            fault_class=FaultClass.UNKNOWN,
            action=DEFAULT_ACTION[FaultClass.UNKNOWN],
            confidence=0.1,
            summary="no evidence matched any rule",
        )
    if scheduler is None:
        assert log is not None
        return log
    if log is None or log.fault_class is FaultClass.UNKNOWN:
        return scheduler
    if scheduler.fault_class in AUTHORITATIVE or scheduler.fault_class is FaultClass.JOB_CANCELLED:
        return scheduler.model_copy(update={"cascade": [*scheduler.cascade, *log.evidence]})
    if scheduler.fault_class is FaultClass.NODE_LOST and (
        log.fault_class in WEAK_LOG_CLASSES or log.confidence < WEAK_LOG_CONFIDENCE
    ):
        # ranks timing out, or losing their sockets, because a node vanished: the node
        # loss is the root
        return scheduler.model_copy(
            update={"cascade": [*scheduler.cascade, *log.evidence, *log.cascade]}
        )
    # the log names a more specific root cause; the scheduler may know the node
    hosts = log.culprit_hosts or scheduler.culprit_hosts
    action = log.action
    if action is RecoveryAction.RESTART:
        action = restart_action(log.fault_class, hosts)
    return log.model_copy(
        update={
            "culprit_hosts": hosts,
            "action": action,
            "evidence": [*log.evidence, *scheduler.evidence],
        }
    )
