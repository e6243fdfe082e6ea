from __future__ import annotations

from datetime import UTC, datetime

from resurrect.contracts import (
    Diagnosis,
    Evidence,
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    NodeInfo,
    RecoveryAction,
    SignalKind,
)
from resurrect.rules.scheduler_evidence import combine, scheduler_diagnosis, scheduler_evidence

JOB = JobInfo(job_id="5", state=JobState.NODE_FAIL, nodes=["n1", "n2"])


def report(**extra: object) -> Interruption:
    data: dict[str, object] = {
        "cluster": "c",
        "job_id": "5",
        "restart_count": 0,
        "source": "t",
        "reason": "r",
        "observed_at": datetime.now(UTC),
    }
    data.update(extra)
    return Interruption.model_validate(data)


def test_node_fail_with_a_down_node_names_that_node() -> None:
    nodes = [
        NodeInfo(name="n1", state="IDLE"),
        NodeInfo(name="n2", state="DOWN", flags=["NOT_RESPONDING"]),
    ]
    diagnosis = scheduler_diagnosis(scheduler_evidence(report(), JOB, nodes))
    assert diagnosis is not None
    assert diagnosis.fault_class is FaultClass.NODE_LOST
    assert diagnosis.culprit_hosts == ["n2"]
    assert diagnosis.action is RecoveryAction.DRAIN_AND_RESTART


def test_time_limit_beats_log_lines() -> None:
    job = JOB.model_copy(update={"state": JobState.TIMEOUT})
    sched = scheduler_diagnosis(scheduler_evidence(report(), job, []))
    log = Diagnosis(
        fault_class=FaultClass.COLLECTIVE_TIMEOUT, action=RecoveryAction.RESTART, confidence=0.8
    )
    assert combine(log, sched).fault_class is FaultClass.JOB_TIME_LIMIT


def test_specific_log_root_beats_node_fail_and_borrows_its_node() -> None:
    nodes = [NodeInfo(name="n2", state="DOWN")]
    sched = scheduler_diagnosis(scheduler_evidence(report(), JOB, nodes))
    xid = Evidence(
        kind=SignalKind.JOB_LOG,
        text="NVRM: Xid 79",
        role="root",
        fault_class=FaultClass.GPU_HARDWARE,
    )
    log = Diagnosis(
        fault_class=FaultClass.GPU_HARDWARE,
        action=RecoveryAction.RESTART,
        confidence=0.9,
        evidence=[xid],
    )
    combined = combine(log, sched)
    assert combined.fault_class is FaultClass.GPU_HARDWARE
    assert combined.culprit_hosts == ["n2"]
    assert combined.action is RecoveryAction.DRAIN_AND_RESTART


def test_vague_log_class_yields_to_node_loss() -> None:
    nodes = [NodeInfo(name="n1", state="DOWN")]
    sched = scheduler_diagnosis(scheduler_evidence(report(), JOB, nodes))
    log = Diagnosis(
        fault_class=FaultClass.COLLECTIVE_TIMEOUT, action=RecoveryAction.RESTART, confidence=0.9
    )
    assert combine(log, sched).fault_class is FaultClass.NODE_LOST


def test_heartbeat_hint_from_a_sensor() -> None:
    running = JOB.model_copy(update={"state": JobState.RUNNING})
    evidence = scheduler_evidence(
        report(fault_hint=FaultClass.NODE_LOST, suspect_nodes=["n1"], source="node_agent"),
        running,
        [],
    )
    diagnosis = scheduler_diagnosis(evidence)
    assert diagnosis is not None and diagnosis.culprit_hosts == ["n1"]


def test_nothing_known_is_unknown() -> None:
    assert combine(None, None).fault_class is FaultClass.UNKNOWN


def test_a_down_or_reported_node_outranks_nodes_only_not_responding() -> None:
    # e.g. right after slurmctld restarts every node is NOT_RESPONDING for a moment
    nodes = [
        NodeInfo(name="n1", state="ALLOCATED", flags=["NOT_RESPONDING"]),
        NodeInfo(name="n2", state="DOWN", flags=["NOT_RESPONDING"]),
    ]
    diagnosis = scheduler_diagnosis(scheduler_evidence(report(), JOB, nodes))
    assert diagnosis is not None and diagnosis.culprit_hosts == ["n2"]
    both_nr = [NodeInfo(name=n, state="ALLOCATED", flags=["NOT_RESPONDING"]) for n in ("n1", "n2")]
    reported = scheduler_diagnosis(scheduler_evidence(report(suspect_nodes=["n1"]), JOB, both_nr))
    assert reported is not None and reported.culprit_hosts == ["n1"]
    alone = scheduler_diagnosis(scheduler_evidence(report(), JOB, both_nr[:1]))
    assert alone is not None and alone.culprit_hosts == ["n1"]


def test_a_hang_report_is_a_hang_diagnosis() -> None:
    running = JOB.model_copy(update={"state": JobState.RUNNING})
    evidence = scheduler_evidence(
        report(fault_hint=FaultClass.JOB_HANG, source="log_tail"), running, []
    )
    diagnosis = scheduler_diagnosis(evidence)
    assert diagnosis is not None and diagnosis.fault_class is FaultClass.JOB_HANG
    assert diagnosis.action is RecoveryAction.RESTART


def test_a_node_not_responding_in_one_read_is_only_diagnostic() -> None:
    """The recovery tells which nodes stayed not responding across its reads a grace apart
    (``lasting``); any other node only NOT_RESPONDING names no culprit, even a suspect."""
    nr = [NodeInfo(name=n, state="ALLOCATED", flags=["NOT_RESPONDING"]) for n in ("n1", "n2")]
    suspected = report(suspect_nodes=["n1"])
    once = scheduler_evidence(suspected, JOB, nr, lasting=[])
    assert [e.role for e in once if e.rule == "scheduler.node_state"] == ["diagnostic"] * 2
    lasted = scheduler_diagnosis(scheduler_evidence(suspected, JOB, nr, lasting=["n1"]))
    assert lasted is not None and lasted.culprit_hosts == ["n1"]
    down = [NodeInfo(name="n2", state="DOWN", flags=["NOT_RESPONDING"])]
    diagnosis = scheduler_diagnosis(scheduler_evidence(report(), JOB, down, lasting=[]))
    assert diagnosis is not None and diagnosis.culprit_hosts == ["n2"]
