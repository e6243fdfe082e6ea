"""One recovery's evidence as per-node incidents (resurrect/lemons/incidents.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from resurrect.contracts import (
    DEFAULT_ACTION,
    Diagnosis,
    Evidence,
    FaultClass,
    NodeInfo,
    SignalKind,
)
from resurrect.lemons.incidents import node_incidents
from resurrect.lemons.models import NodeIncident

AT = datetime(2026, 6, 1, tzinfo=UTC)
JOB_NODES = ["gpu-1", "gpu-2"]


def evidence(
    fault: FaultClass, host: str, kind: SignalKind, rule: str, role: str = "root"
) -> Evidence:
    return Evidence.model_validate(
        {
            "kind": kind,
            "text": f"{rule} on {host}",
            "role": role,
            "fault_class": fault,
            "host": host,
            "rule": rule,
        }
    )


def diagnosis(fault: FaultClass, hosts: list[str], found: list[Evidence]) -> Diagnosis:
    return Diagnosis(
        fault_class=fault,
        action=DEFAULT_ACTION[fault],
        confidence=0.9,
        culprit_hosts=hosts,
        evidence=found,
    )


def incidents(
    found: Diagnosis, nodes: Sequence[NodeInfo] = (), reported: Sequence[Evidence] = ()
) -> dict[str, NodeIncident]:
    return node_incidents(
        incident="recover/c/7/0",
        job_id="7",
        at=AT,
        diagnosis=found,
        job_nodes=JOB_NODES,
        nodes=nodes,
        reported=reported,
    )


def test_an_xid_the_node_agent_saw_is_an_independent_xid_incident_of_that_node() -> None:
    xid = evidence(FaultClass.GPU_HARDWARE, "gpu-2", SignalKind.KERNEL_LOG, "xid.fallen_off_bus")
    found = incidents(diagnosis(FaultClass.GPU_HARDWARE, ["gpu-2"], [xid]))
    assert list(found) == ["gpu-2"]
    item = found["gpu-2"]
    assert (item.tier, item.kind, item.job_id, item.incident) == (
        "independent",
        "xid",
        "7",
        "recover/c/7/0",
    )
    assert "xid.fallen_off_bus" in item.detail


def test_the_finest_kind_named_by_the_evidence_wins() -> None:
    for rule, kind in (
        ("gpu.ecc.uncorrectable", "ecc"),
        ("xid.nvlink", "nvlink"),
        ("gpu.row_remap.failure", "ecc"),
        ("gpu.nvml.lost", "gpu"),
    ):
        seen = evidence(FaultClass.GPU_HARDWARE, "gpu-1", SignalKind.GPU_EVENT, rule)
        found = incidents(diagnosis(FaultClass.GPU_HARDWARE, ["gpu-1"], [seen]))
        assert found["gpu-1"].kind == kind, rule


def test_a_node_only_the_job_output_names_is_a_job_output_incident() -> None:
    printed = evidence(FaultClass.GPU_HARDWARE, "gpu-1", SignalKind.JOB_LOG, "xid.gpu_fault")
    found = incidents(diagnosis(FaultClass.GPU_HARDWARE, ["gpu-1"], [printed]))
    assert found["gpu-1"].tier == "job_output" and found["gpu-1"].kind == "gpu"


def test_a_node_lost_that_slurm_shows_down_is_independent() -> None:
    printed = evidence(FaultClass.NODE_LOST, "gpu-1", SignalKind.JOB_LOG, "node.marked_dead")
    down = NodeInfo(name="gpu-1", state="DOWN", flags=["NOT_RESPONDING"])
    found = incidents(diagnosis(FaultClass.NODE_LOST, ["gpu-1"], [printed]), [down])
    assert found["gpu-1"].tier == "independent" and found["gpu-1"].kind == "node_lost"


def test_hosts_the_job_did_not_run_on_are_never_named() -> None:
    xid = evidence(FaultClass.GPU_HARDWARE, "login-1", SignalKind.KERNEL_LOG, "xid.other")
    assert incidents(diagnosis(FaultClass.GPU_HARDWARE, ["login-1"], [xid])) == {}


def test_a_hang_culprit_without_hardware_evidence_is_a_probe_incident() -> None:
    probe = evidence(FaultClass.JOB_HANG, "gpu-2", SignalKind.PROGRESS, "stacks.culprit")
    found = incidents(diagnosis(FaultClass.JOB_HANG, ["gpu-2"], [probe]))
    assert found["gpu-2"].tier == "probe" and found["gpu-2"].kind == "hang"


def test_a_straggler_with_the_agent_seeing_its_clocks_slowed_is_independent() -> None:
    probe = evidence(FaultClass.JOB_STRAGGLER, "gpu-1", SignalKind.PROGRESS, "stragglers")
    clocks = evidence(
        FaultClass.GPU_HARDWARE,
        "gpu-1",
        SignalKind.GPU_EVENT,
        "gpu.clocks.hw_slowdown",
        "diagnostic",
    )
    found = incidents(diagnosis(FaultClass.JOB_STRAGGLER, ["gpu-1"], [probe]), reported=[clocks])
    assert found["gpu-1"].tier == "independent" and found["gpu-1"].kind == "straggler"


def test_application_faults_implicate_no_node() -> None:
    crash = evidence(FaultClass.APP_ERROR, "gpu-1", SignalKind.JOB_LOG, "python.traceback")
    assert incidents(diagnosis(FaultClass.APP_ERROR, ["gpu-1"], [crash])) == {}


def test_a_hostile_detail_is_printable_and_bounded() -> None:
    xid = evidence(FaultClass.GPU_HARDWARE, "gpu-1", SignalKind.KERNEL_LOG, "xid.other")
    xid = xid.model_copy(update={"text": "\x1b[2J" + "A" * 5000})
    item = incidents(diagnosis(FaultClass.GPU_HARDWARE, ["gpu-1"], [xid]))["gpu-1"]
    assert "\x1b" not in item.detail and len(item.detail) <= 200
