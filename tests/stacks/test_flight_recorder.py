"""Flight Recorder dumps: the rank behind its peers' last collective is the culprit; dump
files are the job's, so hostile, and are read only as plain data of the rank's owner.

Dumps here are CONSTRUCTED (written by the tests to PyTorch's entry layout; no GPU here)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.step_daemon import step_daemon

from resurrect.errors import JobFileRefused
from resurrect.stacks import flight_recorder
from resurrect.stacks.flight_recorder import (
    behind_ranks,
    dump_path,
    flight_recorder_evidence,
    lagging_ranks,
    rank_flight_record,
    read_flight_record,
)
from resurrect.stacks.processes import RankProcess, job_rank_processes, process_started_at

FIXTURES = Path(__file__).parent.parent / "fixtures" / "flight_recorder"
ME = os.getuid()


def constructed_dump(seq: int, name: str = "nccl:all_reduce", pg: int = 0) -> dict[str, object]:
    """A CONSTRUCTED dump: earlier collectives completed, the last one as given."""
    entries: list[dict[str, object]] = [
        {"pg_id": pg, "collective_seq_id": s, "profiling_name": "nccl:all_reduce",
         "state": "completed"}
        for s in range(1, seq)
    ]  # fmt: skip
    entries.append(
        {"pg_id": pg, "collective_seq_id": seq, "profiling_name": name, "state": "started"}
    )
    return {"version": "2.4", "pg_config": {}, "entries": entries}


def test_the_rank_that_never_entered_the_collective_lags() -> None:
    records = [
        r for rank in range(3) for r in read_flight_record(FIXTURES / f"rank{rank}.json", rank)
    ]
    assert [(r.rank, r.seq, r.state) for r in records] == [
        (0, 42, "started"),
        (1, 42, "started"),
        (2, 41, "completed"),
    ]
    assert lagging_ranks(records) == {"0": [2]}
    [behind] = behind_ranks(records)
    assert (behind.rank, behind.pg_id, behind.seq, behind.peers_seq) == (2, "0", 41, 42)


def test_pytorchs_default_pickle_form_is_read_as_plain_data(tmp_path: Path) -> None:
    dump = tmp_path / "nccl_trace_rank_1"
    dump.write_bytes(pickle.dumps(constructed_dump(7, "nccl:broadcast")))
    [last] = read_flight_record(dump, 1, ME)
    assert (last.rank, last.pg_id, last.seq, last.name) == (1, "0", 7, "nccl:broadcast")


def _text(value: str) -> bytes:
    data = value.encode()
    return b"X" + len(data).to_bytes(4, "little") + data


def test_pytorchs_container_type_tags_read_as_the_value_they_tag(tmp_path: Path) -> None:
    """CONSTRUCTED in the opcodes PyTorch's pickler writes for a tagged list."""
    entry = b"}" + _text("pg_id") + b"K\x00s" + _text("collective_seq_id") + b"K\x09s"
    entry += _text("profiling_name") + _text("nccl:all_reduce") + b"s"
    tagged = b"ctorch.jit._pickle\nrestore_type_tag\n(]" + entry + b"a" + _text("List[Any]")
    raw = b"\x80\x02}" + _text("entries") + tagged + b"tRs."
    dump = tmp_path / "nccl_trace_rank_2"
    dump.write_bytes(raw)
    [last] = read_flight_record(dump, 2, ME)
    assert (last.rank, last.seq, last.name) == (2, 9, "nccl:all_reduce")


def test_a_crafted_pickle_runs_nothing(tmp_path: Path) -> None:
    proof = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {proof}",))

    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(pickle.dumps({"entries": [Exploit()]}))
    with pytest.raises(JobFileRefused, match="refused"):
        read_flight_record(dump, 0, ME)
    assert not proof.exists()


def test_garbage_is_refused_with_a_note(tmp_path: Path) -> None:
    broken = tmp_path / "rank1"
    broken.write_text('{"entries": [{"collective_seq_id": "x"}, 7]')
    with pytest.raises(JobFileRefused, match="not valid JSON"):
        read_flight_record(broken, 1, ME)
    truncated = tmp_path / "rank2"
    truncated.write_bytes(b"\x80\x04\x95cos\nsystem\n")
    with pytest.raises(JobFileRefused, match="not read"):
        read_flight_record(truncated, 2, ME)


def test_a_symlink_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "secret.json"
    target.write_text(json.dumps(constructed_dump(3)))
    link = tmp_path / "nccl_trace_rank_0"
    link.symlink_to(target)
    with pytest.raises(JobFileRefused, match="is a symlink"):
        read_flight_record(link, 0, ME)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "nccl_trace_rank_0"
    os.mkfifo(fifo)
    with pytest.raises(JobFileRefused, match="FIFO"):
        read_flight_record(fifo, 0, ME)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may enter (as /tmp is), where dumps are written."""
    shared = Path(tempfile.mkdtemp(prefix="fr-shared-", dir="/tmp"))
    shared.chmod(0o755)
    yield shared
    shutil.rmtree(shared)


def test_a_file_of_another_owner_is_refused(shared_dir: Path) -> None:
    dump = shared_dir / "nccl_trace_rank_0"
    dump.write_text(json.dumps(constructed_dump(3)))
    dump.chmod(0o644)
    with pytest.raises(JobFileRefused, match="belongs to uid"):
        read_flight_record(dump, 0, ME + 1)


def test_an_oversized_dump_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flight_recorder, "MAX_DUMP_BYTES", 1024)
    dump = tmp_path / "nccl_trace_rank_0"
    with open(dump, "wb") as handle:  # sparse: a large size costs nothing to write
        handle.truncate(1 << 30)
    with pytest.raises(JobFileRefused, match="larger than"):
        read_flight_record(dump, 0, ME)


def fake_proc(tmp_path: Path, pid: int, uid: int, started: float) -> Path:
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    ticks = int((started - 100.0) * os.sysconf("SC_CLK_TCK"))  # booted at 100
    fields = ["S", *["0"] * 18, str(ticks), "0"]
    (proc / str(pid) / "stat").write_text(f"{pid} (python) {' '.join(fields)}\n")
    (proc / "stat").write_text("cpu 1 2 3\nbtime 100\n")
    return proc


def rank_process(rank: int, prefix: str | None, buffer: str = "2000") -> RankProcess:
    return RankProcess(
        4242, rank, "gpu-1", "S", 2, flight_recorder_prefix=prefix, flight_recorder_buffer=buffer
    )


def test_a_ranks_dump_is_found_where_its_environment_says(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 4242, ME, started=1000.0)
    prefix = str(tmp_path / "trace_")
    (tmp_path / "trace_1").write_text(json.dumps(constructed_dump(5)))
    record = rank_flight_record(rank_process(1, prefix), proc)
    assert record.note == "" and [c.seq for c in record.collectives] == [5]


def test_a_dump_of_another_owner_than_the_rank_process_is_refused(
    tmp_path: Path, shared_dir: Path
) -> None:
    proc = fake_proc(tmp_path, 4242, ME + 1, started=1000.0)
    (shared_dir / "trace_1").write_text(json.dumps(constructed_dump(5)))
    (shared_dir / "trace_1").chmod(0o644)
    record = rank_flight_record(rank_process(1, str(shared_dir / "trace_")), proc)
    assert record.collectives == () and "belongs to uid" in record.note


def test_a_processes_start_is_read_from_proc(tmp_path: Path) -> None:
    assert process_started_at(4242, fake_proc(tmp_path, 4242, ME, 1000.0)) == 1000.0
    real = process_started_at(os.getpid())
    assert real is not None and real <= time.time()


def test_a_dump_older_than_the_process_is_an_earlier_runs(tmp_path: Path) -> None:
    dump = tmp_path / "trace_1"
    dump.write_text(json.dumps(constructed_dump(5)))
    os.utime(dump, (500.0, 500.0))
    proc = fake_proc(tmp_path, 4242, ME, started=1000.0)
    record = rank_flight_record(rank_process(1, str(tmp_path / "trace_")), proc)
    assert record.collectives == () and "older than rank 1" in record.note


def test_no_dump_says_why(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 4242, ME, started=1000.0)
    prefix = str(tmp_path / "trace_")
    assert "watchdog timeout" in rank_flight_record(rank_process(1, prefix), proc).note
    off = rank_flight_record(rank_process(1, prefix, buffer=""), proc)
    assert "TORCH_FR_BUFFER_SIZE (TORCH_NCCL_TRACE_BUFFER_SIZE) is not set" in off.note
    relative = rank_flight_record(rank_process(1, "trace_"), proc)
    assert "not an absolute path" in relative.note


def test_the_default_prefix_is_pytorchs() -> None:
    assert dump_path(None, 3) == Path("/tmp/nccl_trace_rank_3")


def test_evidence_names_the_rank_behind_or_says_why_there_is_none(tmp_path: Path) -> None:
    [none] = flight_recorder_evidence([], {}, ["no dump at /tmp/x0", "no dump at /tmp/x0"])
    assert none.rule == "flight_recorder.unavailable"
    assert none.text == "Flight Recorder not available: no dump at /tmp/x0"
    for rank, seq in ((0, 9), (1, 8), (2, 9)):
        (tmp_path / f"d{rank}").write_text(json.dumps(constructed_dump(seq, "nccl:all_gather")))
    records = [c for r in range(3) for c in read_flight_record(tmp_path / f"d{r}", r, ME)]
    [item] = flight_recorder_evidence(records, {0: "a", 1: "b", 2: "a"}, [])
    assert (item.rule, item.rank, item.host, item.source) == (
        "flight_recorder.behind", 1, "b", "job_output"
    )  # fmt: skip
    assert item.fields["seq"] == "8" and item.fields["peers_seq"] == "9"
    assert item.fields["collective"] == "nccl:all_gather" and item.fields["pg"] == "0"


def test_a_real_rank_process_dump_is_found_through_proc(tmp_path: Path) -> None:
    """A real process with a rank's environment (as torchrun sets it), a task of job 990077
    as the kernel sees it (under a stand-in step daemon), found through the real /proc; its
    CONSTRUCTED dump, written after it started, is read as its owner's file."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SLURM_JOB_ID": "990077",
        "RANK": "1",
        "WORLD_SIZE": "2",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(tmp_path / "nccl_trace_rank_"),
    }
    with step_daemon("990077", ["sleep", "30"], env=env, workdir=tmp_path):
        deadline = time.monotonic() + 5
        found = []
        while not found and time.monotonic() < deadline:
            found = job_rank_processes("990077", owner_uid=os.getuid())
            time.sleep(0.05)
        [process] = found
        assert process.flight_recorder_prefix == str(tmp_path / "nccl_trace_rank_")
        assert "no dump at" in rank_flight_record(process).note
        (tmp_path / "nccl_trace_rank_1").write_text(json.dumps(constructed_dump(4)))
        record = rank_flight_record(process)
        assert record.note == "" and [c.seq for c in record.collectives] == [4]


@pytest.mark.parametrize("form", ["pkl", "json"])
def test_real_pytorch_dumps_name_the_rank_behind(form: str) -> None:
    """REAL dumps of PyTorch 2.13's Flight Recorder of a 2-rank gloo job, as the pickle it
    writes on a timeout and as ``_dump_fr_trace_json`` writes it (see the fixtures' README)."""
    records = [
        c
        for rank in (0, 1)
        for c in read_flight_record(FIXTURES / f"real-gloo-rank{rank}.{form}", rank)
    ]
    assert [(c.rank, c.pg_id, c.seq, c.name) for c in records] == [
        (0, "0", 4, "gloo:all_reduce"),
        (1, "0", 3, "gloo:all_reduce"),
    ]
    [behind] = behind_ranks(records)
    assert (behind.rank, behind.seq, behind.peers_seq) == (1, 3, 4)
