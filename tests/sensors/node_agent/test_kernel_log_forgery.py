"""Only records the NVIDIA driver writes become kernel-log readings: no local user can put
an Xid in the agent's mouth by having the kernel quote a name they chose (a segfaulting
file's name, a task name, a cgroup name), by writing to /dev/kmsg, or by naming a GPU the
node does not have; and where NVML is present, a kernel-log Xid NVML never reported is
weak evidence until NVML confirms it.

The records in tests/fixtures/kmsg/forged-xid-captured.kmsg were captured from a real
kernel's /dev/kmsg (see its README)."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.kernel_records import forged_kmsg_record, written_to_kmsg

from resurrect.contracts import Evidence
from resurrect.evidence_trust import UNCONFIRMED_FIELD, evidence_source
from resurrect.rules.engine import RuleEngine
from resurrect.sensors.node_agent.agent import NodeAgent
from resurrect.sensors.node_agent.fake_nvml import FakeNvml
from resurrect.sensors.node_agent.kernel_log import (
    KernelLogSource,
    driver_message,
    journal_record,
    kmsg_record,
    nvidia_pci_addresses,
)
from tests.sensors.node_agent.test_agent import RecordingReporter, fast, running, until

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kmsg"
GPU3 = "0000:48:00"  # FakeNvml's GPU 3
FORGED = [
    line.replace("0000:3b:00", GPU3)
    for name in ("forged-xid-captured.kmsg", "forged-xid-formats.kmsg")
    for line in (FIXTURES / name).read_text().splitlines()
    if line
]
GENUINE = f"4,900,999000000,-;NVRM: Xid (PCI:{GPU3}): 119, pid=77, name=python, Timeout"
GENUINE_79 = f"3,901,999000001,-;NVRM: Xid (PCI:{GPU3}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


@pytest.mark.parametrize("record", FORGED, ids=range(len(FORGED)))
def test_no_forged_record_is_a_driver_message(record: str) -> None:
    parsed = kmsg_record(record)
    assert parsed is None or driver_message(parsed, {GPU3}) is None


def test_the_drivers_own_records_are_driver_messages() -> None:
    for record in (GENUINE, GENUINE_79, f"6,1,2,c,caller=T1;NVRM: GPU at PCI:{GPU3}: GPU-ab12"):
        parsed = kmsg_record(record)
        assert parsed is not None and driver_message(parsed, {GPU3}) is not None, record


async def feed(fifo: Path, records: list[str]) -> None:
    writer = await asyncio.to_thread(os.open, fifo, os.O_WRONLY)
    try:
        os.write(writer, "".join(r + "\n" for r in records).encode())
    finally:
        os.close(writer)


def agent_on_fifo(
    tmp_path: Path, engine: RuleEngine, nvml: FakeNvml, settings: Any = None, **kernel: Any
) -> tuple[NodeAgent, RecordingReporter, Path]:
    """An agent whose kernel log is a FIFO at ``tmp_path/kmsg`` (written with :func:`feed`)."""
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    reporter = RecordingReporter()
    source = KernelLogSource(kmsg_path=fifo, journal_argv=["false"], **kernel)
    agent = NodeAgent(
        settings or fast(), nvml=nvml, engine=engine, reporter=reporter, kernel_log=source
    )
    return agent, reporter, fifo


async def test_the_agent_reports_none_of_the_forged_records(
    engine: RuleEngine, nvml: FakeNvml, tmp_path: Path
) -> None:
    agent, reporter, fifo = agent_on_fifo(tmp_path, engine, nvml)
    async with running(agent):
        await feed(fifo, [*FORGED, GENUINE])  # in order: the genuine one comes last
        await until(lambda: reporter.found)
    assert [(e.rule, e.fields.get("xid")) for _, e in reporter.found] == [("xid.gpu_fault", "119")]


async def test_without_nvml_the_gpus_are_the_nvidia_drivers_pci_devices(
    engine: RuleEngine, tmp_path: Path
) -> None:
    sysfs = tmp_path / "drivers" / "nvidia"
    sysfs.mkdir(parents=True)
    (sysfs / f"{GPU3}.0").symlink_to(tmp_path)
    (sysfs / "module").symlink_to(tmp_path)
    (sysfs / "bind").write_text("")
    assert nvidia_pci_addresses(sysfs) == {GPU3}
    nvml = FakeNvml.with_gpus(8, library_missing=True)
    agent, reporter, fifo = agent_on_fifo(tmp_path, engine, nvml, nvidia_sysfs=sysfs)
    other = GENUINE_79.replace(GPU3, "0000:58:00")
    async with running(agent):
        await feed(fifo, [*FORGED, other, GENUINE_79])
        await until(lambda: reporter.found)
    found = [evidence for _, evidence in reporter.found]
    assert {e.rule for e in found} == {"xid.fallen_off_bus", "gpu.fallen_off_bus"}
    assert {(e.role, e.fields["pci"]) for e in found} == {("root", GPU3)}
    # no NVML to confirm it with: the driver's record is the node agent's word, as before
    assert {evidence_source(e) for e in found} == {"node_agent"}


async def test_a_kernel_xid_nvml_never_reported_is_weak_until_nvml_confirms(
    engine: RuleEngine, nvml: FakeNvml, tmp_path: Path
) -> None:
    # every finding reported (no de-duplication): the test sees each
    agent, reporter, fifo = agent_on_fifo(tmp_path, engine, nvml, fast(dedup_window_s=0))
    async with running(agent):
        writer = await asyncio.to_thread(os.open, fifo, os.O_WRONLY)
        try:
            os.write(writer, (GENUINE_79 + "\n").encode())
            await until(lambda: kernel_findings(reporter))
            weak = kernel_findings(reporter)
            nvml.emit_xid(3, 79)  # NVML reports it too
            await until(lambda: findings_of(reporter, "nvml-event"))
            os.write(writer, (GENUINE_79 + "\n").encode())
            await until(lambda: len(kernel_findings(reporter)) > len(weak))
        finally:
            os.close(writer)
    confirmed = kernel_findings(reporter)[len(weak) :]
    assert weak and all(e.role == "diagnostic" and UNCONFIRMED_FIELD in e.fields for e in weak)
    assert all(evidence_source(e) not in {"node_agent", "scheduler"} for e in weak)
    by_nvml = findings_of(reporter, "nvml-event")
    assert {(e.rule, e.role) for e in by_nvml} >= {("xid.fallen_off_bus", "root")}
    assert confirmed and all(e.role == "root" for e in confirmed)
    assert all(UNCONFIRMED_FIELD not in e.fields for e in confirmed)
    assert {evidence_source(e) for e in confirmed} == {"node_agent"}


def findings_of(reporter: RecordingReporter, source: str) -> list[Evidence]:
    return [e for _, e in reporter.found if e.fields.get("source") == source]


def kernel_findings(reporter: RecordingReporter) -> list[Evidence]:
    return findings_of(reporter, "kmsg")


def journal_line(message: str | list[int], **fields: str) -> str:
    entry = {"MESSAGE": message, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0", "PRIORITY": "4"}
    entry.update(fields)
    return json.dumps(entry)


def test_journald_records_are_read_whole_with_their_transport_and_facility() -> None:
    good = "NVRM: Xid (PCI:0000:48:00): 79, pid=1, GPU has fallen off the bus."
    split = "a.out[1]: segfault at 0 ip 0 sp 0 error 4 in x\n" + good
    cases = {
        journal_line(good): True,
        journal_line(list(good.encode())): True,
        journal_line(split): False,  # one record, whose first line is no driver message
        journal_line(good, _TRANSPORT="syslog"): False,
        journal_line(good, _TRANSPORT="stdout"): False,
        journal_line(good, SYSLOG_FACILITY="1"): False,
        good: False,  # "-o cat" text: transport and facility unknown
        "{not json": False,
    }
    for line, accepted in cases.items():
        record = journal_record(line)
        got = record is not None and driver_message(record, {GPU3}) is not None
        assert got is accepted, line


async def test_the_journald_fallback_reads_json_records(tmp_path: Path) -> None:
    good = "NVRM: Xid (PCI:0000:48:00): 79, pid=1, GPU has fallen off the bus."
    script = tmp_path / "journal.sh"
    lines = [
        journal_line("NVRM: " + "x" * 100_000),  # over the stream's line limit: dropped
        journal_line("x[1]: segfault at 0 in y\n" + good),
        journal_line(good),
    ]
    script.write_text("#!/bin/sh\n" + "".join(f"echo '{line}'\n" for line in lines))
    script.chmod(0o755)
    source = KernelLogSource(kmsg_path=tmp_path / "missing", journal_argv=[str(script)])
    source.bind_inventory(lambda: {GPU3})
    readings = [reading async for reading in source.readings()]
    assert [(r.source, r.pci, r.text) for r in readings] == [("journald", GPU3, good)]


# ------------------------------------------------------------------ fuzzing
@settings(max_examples=1000, deadline=None)
@given(st.randoms(use_true_random=False))
def test_no_record_a_user_can_make_the_kernel_write_is_the_drivers(rng: random.Random) -> None:
    for record in (forged_kmsg_record(rng, GPU3), written_to_kmsg(rng, GPU3)):
        parsed = kmsg_record(record)
        assert parsed is None or driver_message(parsed, {GPU3}) is None, record


@settings(max_examples=1000, deadline=None)
@given(st.text(max_size=400), st.integers(0, 200))
def test_any_record_text_is_read_without_error(text: str, prio: int) -> None:
    for line in (f"{prio},1,2,-;{text}", text, journal_line(text, SYSLOG_FACILITY=str(prio))):
        for record in (kmsg_record(line), journal_record(line)):
            message = None if record is None else driver_message(record, {GPU3})
            assert message is None or message.startswith("NVRM: ")
