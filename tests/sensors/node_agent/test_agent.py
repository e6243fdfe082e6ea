"""The agent's loops against the fake NVML: reporting, de-duplication, resilience."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from resurrect.config import AgentSettings
from resurrect.contracts import Evidence, FaultClass
from resurrect.contracts.node_health import AgentStopped, NodeFindings, NodeHeartbeat
from resurrect.rules.engine import RuleEngine
from resurrect.sensors.node_agent import nvml_api as api
from resurrect.sensors.node_agent.agent import NodeAgent
from resurrect.sensors.node_agent.fake_nvml import FakeNvml
from resurrect.sensors.node_agent.kernel_log import KernelLogSource
from resurrect.sensors.node_agent.limiter import FindingLimiter
from resurrect.sensors.node_agent.reporters import DeliveryError


class RecordingReporter:
    """A AgentReporter that keeps everything, with the monotonic time it arrived."""

    def __init__(self) -> None:
        self.beats: list[tuple[float, NodeHeartbeat]] = []
        self.found: list[tuple[float, Evidence]] = []
        self.stops: list[AgentStopped] = []

    async def heartbeat(self, beat: NodeHeartbeat) -> None:
        self.beats.append((time.monotonic(), beat))

    async def findings(self, findings: NodeFindings) -> None:
        self.found.extend((time.monotonic(), item) for item in findings.evidence)

    async def stopped(self, stopped: AgentStopped) -> None:
        self.stops.append(stopped)

    def rules(self) -> list[tuple[str | None, str | None]]:
        return [(item.rule, item.gpu) for _, item in self.found]


def fast(**overrides: object) -> AgentSettings:
    values: dict[str, object] = {
        "node_name": "gpu-node-1",
        "interval_s": 0.1,
        "heartbeat_interval_s": 0.05,
        "event_wait_ms": 50,
        "kernel_log": False,
    }
    values.update(overrides)
    return AgentSettings.model_validate(values)


@asynccontextmanager
async def running(
    agent: NodeAgent, ready: Callable[[], object] | None = None
) -> AsyncIterator[asyncio.Event]:
    """The agent running; entered once ``ready()`` (by default: its first poll is done, so
    NVML is open and its events registered)."""
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await until(ready or (lambda: agent.polls >= 1))
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def until(predicate: object, timeout: float = 3.0) -> float:
    """Wait until ``predicate()`` is true; the seconds it took."""
    start = time.monotonic()
    while not predicate():  # type: ignore[operator]
        if time.monotonic() - start > timeout:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def test_xid_event_is_reported_at_once_and_heartbeats_flow(
    engine: RuleEngine, nvml: FakeNvml
) -> None:
    reporter = RecordingReporter()
    agent = NodeAgent(fast(), nvml=nvml, engine=engine, reporter=reporter)
    async with running(agent):
        assert reporter.found == []  # eight healthy GPUs: nothing to report
        sent = time.monotonic()
        nvml.emit_xid(5, 79)
        await until(lambda: reporter.found)
        arrived, evidence = reporter.found[0]
        assert arrived - sent < 0.5
        assert (evidence.rule, evidence.gpu, evidence.fault_class, evidence.host) == (
            "xid.fallen_off_bus",
            "5",
            FaultClass.GPU_HARDWARE,
            "gpu-node-1",
        )
        nvml.gpus[5].lost = True
        await until(lambda: ("gpu.nvml.lost", "5") in reporter.rules())
        await until(lambda: len(reporter.beats) >= 4)  # heartbeats flow meanwhile
    seqs = [beat.seq for _, beat in reporter.beats]
    assert seqs == list(range(len(seqs))) and len(seqs) >= 4
    assert reporter.beats[0][1].gpus == 8 and reporter.beats[0][1].nvml == "ok"
    assert [stop.node for stop in reporter.stops] == ["gpu-node-1"]
    assert not nvml.initialised  # NVML shut down on stop


async def test_flapping_reading_is_reported_once_per_window(
    engine: RuleEngine, nvml: FakeNvml
) -> None:
    reporter = RecordingReporter()
    agent = NodeAgent(fast(dedup_window_s=60), nvml=nvml, engine=engine, reporter=reporter)
    async with running(agent):
        for flip in range(10):
            nvml.gpus[1].recovery_action = 1 if flip % 2 == 0 else 0
            nvml.gpus[1].ecc_volatile = flip  # a counter that changes every poll
            wanted = agent.polls + 2  # a whole poll reads this flip
            await until(lambda wanted=wanted: agent.polls >= wanted)
    assert sorted(reporter.rules()) == [
        ("gpu.ecc.uncorrectable", "1"),
        ("gpu.recovery_action.reset", "1"),
    ]
    assert agent.limiter.duplicates >= 6


def test_rate_limit_caps_distinct_findings_per_minute() -> None:
    now = [0.0]
    limiter = FindingLimiter(window_s=300, max_per_minute=3, clock=lambda: now[0])

    def finding(i: int) -> Evidence:
        return Evidence(kind="gpu_metric", text=f"t{i}", rule=f"r{i}", gpu="0")  # type: ignore[arg-type]

    assert [limiter.admit(finding(i)) for i in range(5)] == [True, True, True, False, False]
    assert limiter.rate_limited == 2
    now[0] = 61.0
    assert limiter.admit(finding(3)) and not limiter.admit(finding(0))  # 0: still a duplicate
    now[0] = 400.0
    assert limiter.admit(finding(0))


async def test_errors_on_some_gpus_never_stop_the_others(
    engine: RuleEngine, nvml: FakeNvml
) -> None:
    for function in (
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetFieldValues",
    ):
        nvml.fail(function, 3, code=api.NVML_ERROR_UNKNOWN)
    nvml.gpus[4].lost = True
    nvml.fail("nvmlDeviceRegisterEvents", 6, code=api.NVML_ERROR_NOT_SUPPORTED)
    reporter = RecordingReporter()
    agent = NodeAgent(fast(), nvml=nvml, engine=engine, reporter=reporter)
    async with running(agent):
        nvml.gpus[7].row_remap_failure = True
        nvml.emit_xid(0, 48)
        await until(lambda: len(reporter.found) >= 3)
    assert sorted(reporter.rules()) == [
        ("gpu.nvml.lost", "4"),
        ("gpu.row_remap.failure", "7"),
        ("xid.memory", "0"),
    ]
    assert agent.polls >= 2


async def test_a_hung_nvml_call_does_not_stop_heartbeats(
    engine: RuleEngine, nvml: FakeNvml
) -> None:
    nvml.delay("nvmlDeviceGetRemappedRows", 0.5)  # 8 GPUs: each poll hangs ~4 s
    reporter = RecordingReporter()
    agent = NodeAgent(fast(heartbeat_interval_s=0.1), nvml=nvml, engine=engine, reporter=reporter)
    async with running(agent, ready=lambda: reporter.beats):  # the first poll hangs
        await until(lambda: len(reporter.beats) >= 10)  # spans two hung polls
    gaps = [b[0] - a[0] for a, b in zip(reporter.beats, reporter.beats[1:], strict=False)]
    assert max(gaps) < 0.3


async def test_without_nvml_the_agent_still_heartbeats(engine: RuleEngine) -> None:
    reporter = RecordingReporter()
    nvml = FakeNvml.with_gpus(4, library_missing=True)
    agent = NodeAgent(fast(), nvml=nvml, engine=engine, reporter=reporter)
    async with running(agent):
        await until(lambda: agent.polls >= 3 and reporter.beats)  # two whole polls reported
    beat = reporter.beats[-1][1]
    assert (beat.gpus, beat.nvml) == (
        0,
        "NVML library not found (no NVIDIA driver on this machine)",
    )
    assert reporter.found == [] and reporter.stops


async def test_kernel_log_xid_is_reported_with_its_gpu(
    engine: RuleEngine, nvml: FakeNvml, tmp_path: Path
) -> None:
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    reporter = RecordingReporter()
    kernel = KernelLogSource(kmsg_path=fifo, journal_argv=["false"])
    agent = NodeAgent(fast(), nvml=nvml, engine=engine, reporter=reporter, kernel_log=kernel)
    async with running(agent):
        assert kernel.origin == "kmsg"
        writer = os.open(fifo, os.O_WRONLY)
        try:
            os.write(writer, b"6,100,5000,-;usb 1-1: new device\n SUBSYSTEM=usb\n")
            os.write(
                writer,
                b"4,101,5001,-;NVRM: Xid (PCI:0000:48:00): 119, pid=77, name=python,"
                b" Timeout after 6s of waiting for RPC response from GPU3 GSP!\n",
            )
            await until(lambda: reporter.found)
        finally:
            os.close(writer)
    [(_, evidence)] = reporter.found
    assert (evidence.rule, evidence.gpu, evidence.kind.value) == (
        "xid.gpu_fault",
        "3",
        "kernel_log",
    )
    assert evidence.fields["source"] == "kmsg" and evidence.fields["xid"] == "119"


async def test_kernel_log_falls_back_to_journald_command(tmp_path: Path) -> None:
    script = tmp_path / "journal.sh"
    entries = [
        {"MESSAGE": "NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus."},
        {"MESSAGE": "eth0: link up"},
    ]
    lines = [json.dumps({**e, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0"}) for e in entries]
    script.write_text("#!/bin/sh\n" + "".join(f"echo '{line}'\n" for line in lines))
    script.chmod(0o755)
    source = KernelLogSource(kmsg_path=tmp_path / "missing", journal_argv=[str(script)])
    source.bind_inventory(lambda: {"0000:18:00"})
    readings = [reading async for reading in source.readings()]
    assert source.origin == "journald"
    assert [(r.source, r.pci) for r in readings] == [("journald", "0000:18:00")]


async def test_nvml_that_appears_later_is_picked_up(engine: RuleEngine) -> None:
    """The driver was still loading when the agent started: it retries and then watches."""
    nvml = FakeNvml.with_gpus(8, library_missing=True)
    reporter = RecordingReporter()
    agent = NodeAgent(fast(nvml_retry_s=0.2), nvml=nvml, engine=engine, reporter=reporter)
    async with running(agent):
        assert reporter.beats[-1][1].gpus == 0
        nvml.library_missing = False
        await until(lambda: reporter.beats[-1][1].gpus == 8)
        nvml.emit_xid(1, 79)
        await until(lambda: reporter.found)
    assert reporter.rules() == [("xid.fallen_off_bus", "1")]
    assert reporter.beats[-1][1].nvml == "ok"


class FlakyReporter(RecordingReporter):
    """Refuses findings while ``down`` is set, as TemporalReporter does when Temporal is away."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.refused = 0

    async def findings(self, findings: NodeFindings) -> None:
        if self.down:
            self.refused += 1
            raise DeliveryError("control plane away")
        await super().findings(findings)


async def test_findings_survive_a_control_plane_outage(engine: RuleEngine, nvml: FakeNvml) -> None:
    reporter = FlakyReporter()
    agent = NodeAgent(fast(), nvml=nvml, engine=engine, reporter=reporter)
    async with running(agent):
        nvml.emit_xid(2, 79)  # a one-shot event while Temporal is unreachable
        await until(lambda: reporter.refused >= 1)
        assert reporter.found == []
        reporter.down = False
        await until(lambda: reporter.found)  # delivered with the next heartbeat
    assert reporter.rules() == [("xid.fallen_off_bus", "2")]
    assert agent.findings_sent == 1
