"""Attack 1 (issue 20): a job's Flight Recorder dump froze the node agent.

A 450 KB pickle of a dict whose 32,000 integer keys all hash alike is quadratic to build, in
one C call holding the GIL: unpickled inside the agent, it stopped the heartbeat loop for
seconds (17 s here), past the silence threshold, and the node was declared lost. Dumps are
now parsed by a helper process (the dump's owner, CPU/memory rlimits, a wall-clock
deadline, an output cap) that reads pickles by an opcode allow-list with string dict keys
only: the hostile dump is a note, the agent's real heartbeat loop keeps its interval, and
a good rank's dump in the same probe is still read.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.checkpoint_attacks import job_owner, reachable_tmpdir

from resurrect.config import AgentSettings
from resurrect.contracts.node_health import AgentStopped, NodeFindings, NodeHeartbeat
from resurrect.errors import JobFileRefused
from resurrect.rules.engine import RuleEngine, load_engine
from resurrect.sensors.node_agent.agent import NodeAgent
from resurrect.sensors.node_agent.fake_nvml import FakeNvml
from resurrect.stacks.flight_recorder import rank_flight_record, read_flight_record
from resurrect.stacks.processes import RankProcess
from resurrect.untrusted.runner import ParseLimits

ME = os.getuid()
FIXTURES = Path(__file__).parent.parent / "fixtures" / "flight_recorder"
HASH_MODULUS = (1 << 61) - 1  # CPython hashes an int n as n mod 2**61 - 1


def colliding_keys_pickle(keys: int) -> bytes:
    """A dump whose ``pg_status`` dict has ``keys`` integer keys that all hash to 7, written
    opcode by opcode (building that dict here would cost what the attack costs)."""
    items = bytearray()
    for k in range(1, keys + 1):
        number = (HASH_MODULUS * k + 7).to_bytes(10, "little", signed=True)
        items += b"\x8a\x0a" + number + b"K\x00"  # LONG1 key, BININT1 0
    text = lambda s: b"\x8c" + bytes([len(s)]) + s.encode()  # noqa: E731
    return (
        b"\x80\x04}" + text("entries") + b"]s" + text("pg_status") + b"}(" + bytes(items) + b"us."
    )


def dump_of(seq: int) -> str:
    entry = {"pg_id": 0, "collective_seq_id": seq, "profiling_name": "nccl:all_reduce",
             "state": "started"}  # fmt: skip
    return json.dumps({"version": "2.10", "entries": [entry]})


def proc_of(root: Path, pid: int, uid: int) -> Path:
    """A /proc with one process of ``uid`` (started long before the dumps)."""
    proc = root / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "status").write_text(f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n")
    (proc / str(pid) / "stat").write_text(f"{pid} (python) S {' '.join(['0'] * 18)} 0 0\n")
    (proc / "stat").write_text("btime 0\n")
    return proc


class BeatTimes:
    """The node agent's reporter: the monotonic time each heartbeat arrived."""

    def __init__(self) -> None:
        self.beats: list[float] = []

    async def heartbeat(self, beat: NodeHeartbeat) -> None:
        self.beats.append(time.monotonic())

    async def findings(self, findings: NodeFindings) -> None:
        pass

    async def stopped(self, stopped: AgentStopped) -> None:
        pass


@pytest.fixture(scope="module")
def engine() -> RuleEngine:
    return load_engine()


@pytest.fixture
def shared() -> Iterator[Path]:
    yield from reachable_tmpdir()


async def test_a_dump_of_colliding_integer_keys_does_not_stop_the_agents_heartbeat(
    tmp_path: Path, engine: RuleEngine
) -> None:
    hostile = tmp_path / "hostile_rank_0"
    hostile.write_bytes(colliding_keys_pickle(32_000))
    assert 400_000 < hostile.stat().st_size < 500_000  # the size the audit used
    (tmp_path / "good_rank_1").write_text(dump_of(12))
    proc = proc_of(tmp_path, 4242, ME)
    ranks = [
        RankProcess(4242, rank, "gpu-1", "S", 2, flight_recorder_prefix=str(tmp_path / prefix),
                    flight_recorder_buffer="2000")
        for rank, prefix in ((0, "hostile_rank_"), (1, "good_rank_"))
    ]  # fmt: skip
    reporter = BeatTimes()
    settings = AgentSettings.model_validate(
        {"node_name": "gpu-1", "heartbeat_interval_s": 0.05, "kernel_log": False}
    )
    agent = NodeAgent(settings, nvml=FakeNvml.with_gpus(2), engine=engine, reporter=reporter)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        while len(reporter.beats) < 2:  # the agent is beating
            await asyncio.sleep(0.01)
        began = time.monotonic()
        records = await asyncio.gather(
            *(asyncio.to_thread(rank_flight_record, rank, proc) for rank in ranks)
        )
        took = time.monotonic() - began
        beats_then = len(reporter.beats)
        while len(reporter.beats) < beats_then + 2:  # two beats after the reads
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)
    hostile_record, good_record = records
    assert hostile_record.collectives == ()
    assert "a dict key of type int: refused" in hostile_record.note
    assert [(c.rank, c.seq) for c in good_record.collectives] == [(1, 12)]
    arrived = [at for at in reporter.beats if at >= began - 0.1]
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrived)]
    assert (
        len(arrived) >= 3 and max(gaps) < 1.0
    )  # 0.05 s apart; in-process, the attack held it 17-29 s
    assert took < 10.0  # the helper's deadline, at most


def test_a_helper_past_its_deadline_is_stopped_and_is_a_note(tmp_path: Path) -> None:
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_text(dump_of(3))
    began = time.monotonic()
    with pytest.raises(JobFileRefused, match=r"did not finish within 0.01 s: stopped it"):
        read_flight_record(dump, 0, ME, limits=ParseLimits(wall_s=0.01))
    assert time.monotonic() - began < 2.0


def test_a_dump_too_big_for_the_helpers_memory_is_a_note(tmp_path: Path) -> None:
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_text("[" + "[]," * 3_000_000 + "[]]")  # 9 MB of text, ~200 MB of lists
    limits = ParseLimits(memory_bytes=160 << 20)
    with pytest.raises(JobFileRefused, match="needs more than 160 MiB to parse"):
        read_flight_record(dump, 0, ME, limits=limits)


def test_a_dump_over_the_byte_limit_is_not_read(tmp_path: Path) -> None:
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_text(dump_of(3) + " " * 2048)
    with pytest.raises(JobFileRefused, match="larger than 1,024 bytes"):
        read_flight_record(dump, 0, ME, max_bytes=1024)


@pytest.mark.skipif(ME != 0, reason="dropping to the dump's owner needs root")
def test_the_helper_reads_as_the_dumps_owner(shared: Path) -> None:
    """A dump its owner may read is read; one its owner may not read (mode 000, which root
    could read) is not: the kernel checks the owner's rights, not root's."""
    owner = job_owner()
    readable, unreadable = shared / "nccl_trace_rank_0", shared / "nccl_trace_rank_1"
    for path in (readable, unreadable):
        path.write_text(dump_of(5))
        os.chown(path, owner.uid, owner.gid)
    readable.chmod(0o600)
    unreadable.chmod(0o000)
    [last] = read_flight_record(readable, 0, owner.uid, owner_gid=owner.gid)
    assert (last.rank, last.seq) == (0, 5)
    with pytest.raises(PermissionError):
        read_flight_record(unreadable, 1, owner.uid, owner_gid=owner.gid)
