"""The engine on hostile input: prefixes, ANSI, CRLF, invalid UTF-8, huge lines, chunking, fuzz."""

from __future__ import annotations

import random
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from resurrect.contracts import Evidence, SignalKind
from resurrect.rules import LineSplitter, load_engine
from resurrect.rules.engine import MAX_LISTED_RANKS, listed_ranks
from resurrect.rules.text import MAX_LINE_BYTES, clean, split_prefixes

ENGINE = load_engine()
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB (GPU 3; 79 GiB total capacity)"
)


def rules_of(evidence: list[Evidence]) -> list[str | None]:
    return [e.rule for e in evidence]


def test_launcher_prefixes_give_rank_and_host() -> None:
    for line, rank, host in [
        (f"[rank3]: {OOM}", 3, None),
        (f"3: {OOM}", 3, None),
        (f"[default5]:{OOM}", 5, None),
        (f"12: [rank12]: {OOM}", 12, None),
        ("gpu-9:1234:5678 [3] NCCL WARN Cuda failure 'out of memory'", None, "gpu-9"),
    ]:
        (ev,) = [e for e in ENGINE.scan_line(line) if e.rule == "memory.cuda_oom"]
        assert (ev.rank, ev.host) == (rank, host), line


def test_open_mpi_host_pid_prefix_names_the_host_but_a_source_file_does_not() -> None:
    crash = split_prefixes("[gpu-node-17:30211] Signal: Segmentation fault (11)")
    assert (crash.host, crash.body) == ("gpu-node-17", "Signal: Segmentation fault (11)")
    for line in ("[train.py:88] loss=1.2", "[launch.py:315:sigkill_handler] Killing subprocess 9"):
        assert split_prefixes(line).host is None, line


def test_slurmstepd_tag_names_its_node_not_itself() -> None:
    line = "slurmstepd-gpu07: error: execve(): /tmp/slurmd/job89/slurm_script: Input/output error"
    tagged = split_prefixes(line)
    assert (tagged.host, tagged.body) == ("gpu07", line.removeprefix("slurmstepd-gpu07: "))
    assert split_prefixes("slurmstepd: error: Detected 1 oom_kill event in StepId=9.0").host is None


def test_a_survivors_node_failure_report_does_not_name_the_survivor() -> None:
    """A step daemon cancelling its step because another node failed names only itself: the
    lost node is the one srun names, never the reporter's tag."""
    survivor = (
        "slurmstepd-node1: error: *** STEP 1.0 ON node1 CANCELLED AT 2026-12-03T13:21:58"
        " DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"
    )
    (report,) = [e for e in ENGINE.scan_line(survivor) if e.rule == "slurm.node_failure"]
    assert report.host is None
    (named,) = [
        e
        for e in ENGINE.scan_line("srun: error: Node failure on node2")
        if e.rule == "slurm.node_failure"
    ]
    assert named.host == "node2"


def test_prefix_parser_leaves_body() -> None:
    p = split_prefixes("7: [rank7]:[E1206 18:44:12] boom")
    assert (p.rank, p.body) == (7, "[E1206 18:44:12] boom")


def test_ansi_crlf_and_invalid_utf8() -> None:
    raw = (
        b"\x1b[31m[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered"
        b"\x1b[0m \xff\xfe\r\n"
    )
    evidence = ENGINE.scan_line(raw)
    ev = next(e for e in evidence if e.rule == "cuda.illegal_memory_access")
    assert ev.rank == 1 and "\x1b" not in ev.text and not ev.text.endswith("\r")
    assert "\ufffd" in ev.text


def test_clean_controls() -> None:
    assert clean(b"a\x00b\rc\r\n") == "a b c"


def test_long_line_is_cut_and_evidence_bounded() -> None:
    line = OOM + " " + "x" * (5 * 1024 * 1024)
    start = time.perf_counter()
    (ev,) = [e for e in ENGINE.scan_line(line) if e.rule == "memory.cuda_oom"]
    assert time.perf_counter() - start < 1.0
    assert len(ev.text) <= 4096
    late = "x" * (MAX_LINE_BYTES + 10) + OOM  # the signature lies past the kept part
    assert ENGINE.scan_line(late) == []


def _stream(data: bytes, sizes: list[int]) -> list[tuple[str | None, int | None]]:
    state = ENGINE.new_state(file="f")
    out: list[Evidence] = []
    pos = 0
    i = 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        out.extend(ENGINE.scan_chunk(data[pos : pos + n], state))
        pos += n
        i += 1
    out.extend(ENGINE.finish(state))
    return [(e.rule, e.line) for e in out]


SAMPLE = (
    "[rank0]: iteration 1/10 | loss 2.3\r\n"
    f"[rank1]: {OOM}\n"
    "\n" + "y" * (MAX_LINE_BYTES * 3) + "\n"
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    "slurmstepd: error: *** JOB 3 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO TIME LIMIT ***"
).encode()


def test_chunked_stream_equals_line_by_line() -> None:
    expected: list[tuple[str | None, int | None]] = []
    for number, line in enumerate(SAMPLE.split(b"\n"), start=1):
        expected.extend(
            (e.rule, number)
            for e in ENGINE.scan_line(line, line=number)
            if e.rule != "slurm.time_limit"
        )
    expected.append(("slurm.time_limit", 6))
    rng = random.Random(7)
    for sizes in ([len(SAMPLE)], [1], [3, 17, 4096], [rng.randint(1, 50000) for _ in range(20)]):
        assert sorted(_stream(SAMPLE, sizes), key=lambda x: x[1] or 0) == expected, sizes


def test_time_limit_captures_previous_line_across_chunks() -> None:
    data = (
        b"2025-01-01 00:00:00 step 5\n\n"
        b"slurmstepd: error: *** JOB 3 ON n1 CANCELLED AT 2025-01-01T02:00:00 "
        b"DUE TO TIME LIMIT ***\n"
    )
    for size in (5, len(data)):
        state = ENGINE.new_state()
        found = []
        for i in range(0, len(data), size):
            found.extend(ENGINE.scan_chunk(data[i : i + size], state))
        (ev,) = found
        assert ev.fields["previous_line"] == "2025-01-01 00:00:00 step 5"


def test_line_splitter_partial_and_overlong() -> None:
    splitter = LineSplitter(limit=8)
    got = list(splitter.feed(b"abc"))
    got += list(splitter.feed(b"def\n0123456789abcdef"))
    got += list(splitter.feed(b"ghij\nxy"))
    got += list(splitter.flush())
    assert got == [(1, b"abcdef"), (2, b"01234567"), (3, b"xy")]


ADVERSARIAL = [
    "NVRM: Xid (PCI:" + "0" * 20000,
    "RuntimeError: " + "a" * 16000,
    "[" + "1, " * 6000 + "] joined but didn't finish",
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=" + "9" * 16000,
    "srun: error: " + "a-" * 8000 + ": task",
    "@" * 16000 + " $ ",
    "a@" + "b." * 8000,
    "Got completion from peer " + "1." * 8000,
    "CUDA error: " + "E" * 16000,
    "failed to save " * 1000 + "checkpoint",
    ("x" * 100 + "fallen off the bus") * 150,
    "out of memory " * 1200,
    "   host" + " " * 16000 + ":",
]


def test_adversarial_lines_are_fast() -> None:
    for line in ADVERSARIAL:
        for kind in (SignalKind.JOB_LOG, SignalKind.KERNEL_LOG):
            start = time.perf_counter()
            ENGINE.scan_line(line, kind=kind)
            elapsed = time.perf_counter() - start
            assert elapsed < 0.25, (line[:60], elapsed)


LITERAL_SOUP = st.sampled_from(
    [lit.encode() for lit in ENGINE.literals()]
    + [b"\n", b"\r", b"\x1b[31m", b"\xff", b"[rank3]:", b"3: ", b" ", b"9"]
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.one_of(st.binary(max_size=200), LITERAL_SOUP), max_size=60),
    st.integers(min_value=1, max_value=300),
)
def test_fuzz_stream_never_crashes(parts: list[bytes], chunk: int) -> None:
    data = b"".join(parts)
    state = ENGINE.new_state()
    start = time.perf_counter()
    out: list[Evidence] = []
    for i in range(0, len(data), chunk):
        out.extend(ENGINE.scan_chunk(data[i : i + chunk], state))
    out.extend(ENGINE.finish(state))
    assert time.perf_counter() - start < 2.0
    assert all(e.line is not None and 1 <= e.line <= data.count(b"\n") + 1 for e in out)


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=0, max_size=40000))
def test_fuzz_scan_line_bounded(data: bytes) -> None:
    start = time.perf_counter()
    for ev in ENGINE.scan_line(data, kind=SignalKind.KERNEL_LOG):
        assert len(ev.text) <= 4096
    assert time.perf_counter() - start < 0.5


def test_a_line_listing_ranks_is_evidence_for_each_listed_rank() -> None:
    found = ENGINE.scan_line(
        "ABORT!!! Out of all 4 trainers, the trainer process with rank=[0, 2] was aborted."
    )
    listed = [e for e in found if e.rule == "mechanism.launcher_rank_failed"]
    assert [e.rank for e in listed] == [0, 2]


def test_listed_ranks_reads_only_a_list_of_numbers_and_bounds_it() -> None:
    assert listed_ranks("3, 1,3") == [3, 1]
    assert listed_ranks("") == []
    assert listed_ranks("1, x") == []
    assert listed_ranks("1234567") == []
    assert len(listed_ranks(",".join(str(i) for i in range(500)))) == MAX_LISTED_RANKS
