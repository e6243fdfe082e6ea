"""Every signal the agent reads → the right rule → the right fault class and action.

The readings come from the fake NVML through the real source and renderer, and are judged
by the shipped rule packs (gpu-metrics.yaml for NVML readings, xid.yaml for Xid events and
kernel lines) and by the shipped attribution, exactly as in production.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from resurrect.contracts import FaultClass, RecoveryAction, SignalKind
from resurrect.rules import attribute
from resurrect.rules.engine import RuleEngine
from resurrect.rules.pack_check import check_packs
from resurrect.sensors.node_agent import nvml_api as api
from resurrect.sensors.node_agent.classify import classify
from resurrect.sensors.node_agent.fake_nvml import FakeGpu, FakeNvml
from resurrect.sensors.node_agent.kernel_log import KernelLogSource, KernelRecord, kmsg_record
from resurrect.sensors.node_agent.nvml_source import NvmlSource

PACK = Path(__file__).parents[3] / "resurrect" / "rules" / "packs" / "gpu-metrics.yaml"
GPU = 2
HW = FaultClass.GPU_HARDWARE
NET = FaultClass.NETWORK_FABRIC
DRAIN = RecoveryAction.DRAIN_AND_RESTART


def test_gpu_metrics_pack_examples_hold() -> None:
    assert check_packs([PACK], include_shipped=False) == []


def test_healthy_readings_match_no_rule_in_any_pack(engine: RuleEngine, nvml: FakeNvml) -> None:
    nvml.gpus[0].retired_pending = False  # pre-Ampere reading too
    source = NvmlSource(nvml)
    source.open()
    readings = source.poll()
    assert len(readings) >= 8 * 5
    for reading in readings:
        assert classify(engine, reading, node="n1") == [], reading.text


def _set(**values: object) -> Callable[[FakeGpu], None]:
    def apply(gpu: FakeGpu) -> None:
        for key, value in values.items():
            setattr(gpu, key, value)

    return apply


def _lose(gpu: FakeGpu) -> None:
    gpu.lost = True


def _link_down(gpu: FakeGpu) -> None:
    gpu.nvlink_up[5] = False


def _link_recoveries(gpu: FakeGpu) -> None:
    gpu.nvlink_errors[(5, api.NVLINK_COUNTERS["recovery"])] = 2


def _crc_burst(gpu: FakeGpu) -> None:
    gpu.nvlink_errors[(5, api.NVLINK_COUNTERS["crc_data"])] = 400


# (name, change to GPU 2 after a first healthy poll, rule, class, role, action of attribution)
METRIC_CASES: list[tuple[str, Callable[[FakeGpu], None], str, FaultClass, str]] = [
    ("lost", _lose, "gpu.nvml.lost", HW, "root"),
    ("ecc", _set(ecc_volatile=2, ecc_aggregate=2), "gpu.ecc.uncorrectable", HW, "root"),
    ("retired", _set(retired_pending=True), "gpu.retired_pages.pending", HW, "diagnostic"),
    ("remap_pending", _set(row_remap_pending=True), "gpu.row_remap.pending", HW, "diagnostic"),
    ("remap_failure", _set(row_remap_failure=True), "gpu.row_remap.failure", HW, "root"),
    ("action_reset", _set(recovery_action=1), "gpu.recovery_action.reset", HW, "root"),
    ("action_reboot", _set(recovery_action=2), "gpu.recovery_action.reset", HW, "root"),
    ("action_drain_reset", _set(recovery_action=4), "gpu.recovery_action.reset", HW, "root"),
    ("action_drain_p2p", _set(recovery_action=3), "gpu.recovery_action.drain_p2p", NET, "root"),
    ("nvlink_down", _link_down, "gpu.nvlink.down", NET, "root"),
    ("nvlink_recovery", _link_recoveries, "gpu.nvlink.recovery_errors", NET, "diagnostic"),
    ("nvlink_crc", _crc_burst, "gpu.nvlink.crc_errors", NET, "diagnostic"),
    (
        "hw_thermal",
        _set(clock_reasons=0x40),
        "gpu.clocks.hw_slowdown",
        FaultClass.JOB_STRAGGLER,
        "diagnostic",
    ),
]


@pytest.mark.parametrize(
    ("change", "rule", "fault_class", "role"),
    [case[1:] for case in METRIC_CASES],
    ids=[case[0] for case in METRIC_CASES],
)
def test_nvml_reading_to_rule_class_and_action(
    engine: RuleEngine,
    nvml: FakeNvml,
    change: Callable[[FakeGpu], None],
    rule: str,
    fault_class: FaultClass,
    role: str,
) -> None:
    nvml.gpus[GPU].retired_pending = False  # a GPU with page retirement (pre-Ampere)
    source = NvmlSource(nvml)
    source.open()
    source.poll()  # baseline (NVLink states and counters)
    change(nvml.gpus[GPU])
    evidence = [e for r in source.poll() for e in classify(engine, r, node="n7")]
    assert [(e.rule, e.gpu) for e in evidence] == [(rule, str(GPU))]
    [found] = evidence
    assert (found.fault_class, found.role, found.host) == (fault_class, role, "n7")
    assert found.kind in (SignalKind.GPU_METRIC, SignalKind.GPU_EVENT)
    assert found.fields["pci"] == "0000:38:00" and found.fields["uuid"] == nvml.gpus[GPU].uuid
    diagnosis = attribute(evidence)
    if role == "diagnostic":
        # needs attention (the check fails, the node health records it) but is no failure
        assert diagnosis.fault_class is FaultClass.UNKNOWN
    else:
        assert diagnosis.fault_class is fault_class
    if fault_class is HW and role == "root":
        assert (diagnosis.action, diagnosis.culprit_hosts) == (DRAIN, ["n7"])


def test_nvml_reset_required_error(engine: RuleEngine, nvml: FakeNvml) -> None:
    source = NvmlSource(nvml)
    source.open()
    nvml.fail("nvmlDeviceGetRemappedRows", GPU, code=api.NVML_ERROR_RESET_REQUIRED)
    evidence = [e for r in source.poll() for e in classify(engine, r, node="n7")]
    assert [(e.rule, e.gpu, e.fault_class, e.role) for e in evidence] == [
        ("gpu.nvml.reset_required", str(GPU), HW, "root")
    ]
    assert attribute(evidence).action is DRAIN


# Xid codes per design §5 → the Xid table's rule and class.
XID_CASES: list[tuple[int, str, FaultClass, str]] = [
    (79, "xid.fallen_off_bus", HW, "root"),
    *[(code, "xid.gpu_fault", HW, "root") for code in (46, 62, 109, 119, 120, 140, 154)],
    *[(code, "xid.memory", HW, "root") for code in (48, 63, 64, 92, 94, 95)],
    (74, "xid.nvlink_gpu", HW, "root"),
    *[(code, "xid.nvlink", NET, "root") for code in (144, 150)],
    *[(code, "xid.application", FaultClass.CUDA_ERROR, "root") for code in (13, 31, 43)],
    (45, "xid.other", HW, "diagnostic"),
]


@pytest.mark.parametrize(("xid", "rule", "fault_class", "role"), XID_CASES)
def test_nvml_xid_event_goes_through_the_xid_table(
    engine: RuleEngine, nvml: FakeNvml, xid: int, rule: str, fault_class: FaultClass, role: str
) -> None:
    source = NvmlSource(nvml)
    source.open()
    source.open_events()
    nvml.emit_xid(GPU, xid)
    readings = source.wait_event(2000)
    evidence = [e for r in readings for e in classify(engine, r, node="n7")]
    assert [(e.rule, e.fault_class, e.role, e.gpu) for e in evidence] == [
        (rule, fault_class, role, str(GPU))
    ]
    assert evidence[0].kind is SignalKind.GPU_EVENT
    assert evidence[0].fields["xid"] == str(xid)
    diagnosis = attribute(evidence)
    assert diagnosis.fault_class is (fault_class if role == "root" else FaultClass.UNKNOWN)


@pytest.mark.parametrize(("xid", "rule", "fault_class", "role"), XID_CASES)
def test_kernel_xid_line_is_classified_like_the_nvml_event(
    engine: RuleEngine, xid: int, rule: str, fault_class: FaultClass, role: str
) -> None:
    record = f"3,1234,98765432,-;NVRM: Xid (PCI:0000:38:00): {xid}, pid=4242, name=python, Ch 0"
    parsed = kmsg_record(record)
    assert parsed is not None
    source = KernelLogSource(gpu_of_pci=lambda pci: "2" if pci == "0000:38:00" else None)
    source.bind_inventory(lambda: {"0000:38:00"})
    reading = source.reading(parsed, "kmsg")
    assert reading is not None and reading.kind is SignalKind.KERNEL_LOG
    evidence = classify(engine, reading, node="n7")
    assert [(e.rule, e.fault_class, e.role, e.gpu) for e in evidence] == [
        (rule, fault_class, role, "2")
    ]


def test_kernel_non_driver_lines_are_not_readings() -> None:
    source = KernelLogSource()
    source.bind_inventory(lambda: {"0000:3b:00"})
    assert source.reading(kernel("usb 1-1: new high-speed USB device"), "kmsg") is None
    assert kmsg_record(" SUBSYSTEM=pci") is None
    fallen = source.reading(
        kernel("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."), "journald"
    )
    assert fallen is not None and fallen.pci == "0000:3b:00"


def kernel(message: str) -> KernelRecord:
    """A record of the kernel facility."""
    return KernelRecord(0, message)


def test_kernel_fallen_off_bus_line(engine: RuleEngine) -> None:
    source = KernelLogSource()
    source.bind_inventory(lambda: {"0000:3b:00"})
    reading = source.reading(kernel("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."), "kmsg")
    assert reading is not None
    [found] = classify(engine, reading, node="n1")
    assert (found.rule, found.fault_class, found.role) == ("gpu.fallen_off_bus", HW, "root")


H200_DMESG = Path(__file__).parents[2] / "fixtures" / "gpu-h200" / "dmesg.log"


def test_a_real_drivers_lines_around_a_jobs_xids(engine: RuleEngine) -> None:
    """An H200's driver (580.159.04) as it printed a device assert (Xid 43) and an illegal
    address (Xid 31): each Xid is the job's own (cuda.error, no drain); the driver's context
    lines (the GPU's UUID, its board serial number, its load-time banner) are no refusal."""
    source = KernelLogSource(gpu_of_pci=lambda pci: "0" if pci == "0000:00:06" else None)
    source.bind_inventory(lambda: {"0000:00:06"})
    found = []
    for line in H200_DMESG.read_text().splitlines():
        reading = source.reading(kernel(line.split("] ", 1)[1]), "kmsg")
        if reading is not None:
            found.extend(
                (e.fields.get("xid"), e.fault_class) for e in classify(engine, reading, node="vm")
            )
    assert found == [("43", FaultClass.CUDA_ERROR), ("31", FaultClass.CUDA_ERROR)]
    assert source.refused == 0
    forged = source.reading(
        kernel("NVRM: Xid (PCI:0000:00:06) 79, pid=1, GPU has fallen off the bus."), "kmsg"
    )
    assert forged is None and source.refused == 1
