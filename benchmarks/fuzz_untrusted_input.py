"""Fuzzing what a job owner controls through the service loops' per-job handlers.

Hypothesis generates hostile inputs (``--inputs``, 100,000 by default) and each goes
through the code the long-running loops run for every job:

* ``comment``: :func:`resurrect.policy.resolve_job_policy` (random text, JSON with random
  values under the ``resurrect`` key, huge integers, deep nesting, NaN, duplicate keys,
  lone surrogates);
* ``pattern``: :func:`resurrect.scheduler.slurm_json.parse_jobs` on a ``squeue --json``
  document whose first job has a generated ``-o`` / ``-e`` pattern (the listing every
  sensor and activity depends on);
* ``watcher``: :meth:`sensors.slurm_watcher.SlurmWatcher.detect` on a snapshot with a few
  hostile jobs (generated comments, states, output paths) beside one good opted-in job
  that ended NODE_FAIL: the good job must be reported every time;
* ``follower``: :meth:`sensors.log_follower.FollowedFile.read_new_lines` on a generated
  job output: random bytes, or a FIFO, socket, directory, symlink (to ``/dev/zero``, to a
  loop), a device, a sparse file, a missing path; each read must return within 1 s.

``loop_crashes`` counts exceptions that escaped a handler (each would have stopped a
loop before issue 9); ``good_job_missed`` counts watcher rounds where the good job was not
reported; ``slow`` counts inputs that took more than 1 s of CPU (this thread's and its
reaped children's: a loaded machine does not stretch it) or 10 s of wall clock (a read that
blocks). All must be 0. The baseline is
the same inputs' count, and the rate is inputs per second.

``job_record`` (issue 33): every recorded job record of both backends and every Slurm
version (``tests/fixtures/slurm-json``, ``tests/fixtures/slurm-rest``) with one field, or a
field below one, set to a hostile value (number syntax of any script, output patterns with
hostile widths, huge and non-finite numbers, Slurm's number objects half-filled, nested
junk), read by :func:`~resurrect.scheduler.slurm_json.parse_jobs` beside another user's
intact record under each release's naming rules: ``crashes`` counts exceptions, ``other_lost``
documents where the intact record was not returned. ``job_record_poll`` runs a sample through
whole watcher polls of both backends (slurmrestd's view over a synthetic server, the CLI's
compact view over rendered squeue text): ``crashes`` counts polls that raised,
``other_missed`` polls that did not report the other user's failed job.

``kernel_record`` (issue 33): kernel log records a local user can make the kernel write
(its segfault, trap, OOM-killer, hung-task and bridge formats quoting driver-like names,
escaped as /dev/kmsg escapes them) and driver text written to /dev/kmsg, through the node
agent's :func:`~resurrect.sensors.node_agent.kernel_log.driver_message`: ``forged_accepted``
counts records taken as the driver's (must be 0), ``crashes`` any exception.

Then the parsers of issue 20, each with ``--parser-inputs`` seeded, generated inputs
(mutations of real dumps and datagrams, random structures, templates of known attacks),
one JSON line each: ``flight_recorder_json`` and ``flight_recorder_pickle``
(:func:`resurrect.stacks.flight_recorder_dump.parse_dump`, what the parse helper runs;
typed error ``JobFileRefused``), ``flight_recorder_helper`` (a sample through the whole
helper process, :func:`resurrect.stacks.flight_recorder.read_flight_record`),
``pyspy_text`` (:func:`~resurrect.stacks.pyspy_text.parse_pyspy_dump` and the probe's
bounding; no error at all), ``hold_mark`` (:mod:`resurrect.scheduler.hold_marker`: no error)
and ``liveness_datagram`` (:func:`~resurrect.sensors.liveness.wire.open_beat` with the key,
so forged bodies reach the parser; typed error ``WireError``). ``crashes`` counts any other
exception (must be 0); ``worst_s`` is the costliest input's time, ``worst_input`` what it
was. Baselines, measured in the same run on the same input: ``former_s``, the former code
(the standard unpickler for a dump of colliding integer keys; the former frame regex for
the worst py-spy text), and ``ratio`` = former / now.

    python benchmarks/fuzz_untrusted_input.py [--inputs 100000] [--parser-inputs 20000]
        [--json]
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import pickle
import random
import re
import resource
import socket
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import benchmark_parser, print_result
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState, NodeInfo
from resurrect.policy import resolve_job_policy
from resurrect.scheduler.slurm_json import parse_jobs
from resurrect.sensors.log_follower import FollowedFile
from resurrect.sensors.slurm_watcher import SlurmWatcher

REPO = Path(__file__).resolve().parents[1]
SQUEUE = json.loads((REPO / "tests" / "fixtures" / "slurm-json" / "squeue-22.05.json").read_text())
CONFIG = ResurrectConfig.model_validate(
    {"mode": "observe", "policy": {"partitions": {"gpu": {"enabled": True, "max_restarts": 2}}}}
)
BATCH = 10  # inputs per generated example
SLOW_S = 1.0  # CPU seconds an input may cost
BLOCKED_S = 10.0  # wall-clock seconds: an input that waits this long blocked its loop


def cpu_s() -> float:
    """CPU seconds of this thread and of the child processes reaped so far."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.thread_time() + children.ru_utime + children.ru_stime


def too_slow(wall_s: float, cpu: float) -> bool:
    """An input cost more CPU than :data:`SLOW_S` or blocked for :data:`BLOCKED_S`."""
    return cpu > SLOW_S or wall_s > BLOCKED_S


# ---------------------------------------------------------------------------- strategies
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=16)
    | st.sampled_from(["observe", "act", "/ckpt/run", "\ud800", "\x00"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["enabled", "mode", "max_restarts", "checkpoint_dir", "hang_after_s", "notify"]
            )
            | st.text(max_size=8),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def _templated(kind: int, size: int) -> str:
    if kind == 0:
        return '{"resurrect": {"max_restarts": ' + "9" * size + "}}"
    if kind == 1:
        return '{"resurrect": ' + "[" * size + "]" * size + "}"
    if kind == 2:
        return '{"resurrect": ' + '{"a":' * size + "1" + "}" * size + "}"
    if kind == 3:
        return '{"resurrect": {"hang_after_s": ' + ["NaN", "Infinity", "1e999"][size % 3] + "}}"
    return '{"resurrect": true, "resurrect": false}'


comments = st.one_of(
    st.text(max_size=200),
    st.builds(lambda v: json.dumps({"resurrect": v}), json_values),
    st.builds(
        lambda t, v: t + json.dumps({"resurrect": v})[: len(t) + 40],
        st.text(max_size=20),
        json_values,
    ),
    st.builds(_templated, st.integers(0, 4), st.integers(1, 20_000)),
)
# Characters str.isdigit()/isdecimal() accept that are no ASCII digit (issue 33, item 1)
NON_ASCII_DIGITS = ["²", "¹⁰", "٣", "\uff11", "\U0001d7d9", "①", "߁", "⑽", "½", "\u216b"]
patterns = st.one_of(
    st.text(alphabet=st.sampled_from([*"%jJAaxuNntsb%\\/.-_e", "\x00", "é"]), max_size=200),
    st.builds(
        lambda w, c: f"/out/%{w}{c}.log", st.integers(0, 10**30), st.sampled_from("jJAaxuNntsbqe%")
    ),
    st.builds(
        lambda w, c: f"/out/%{w}{c}.log",
        st.lists(st.sampled_from([*NON_ASCII_DIGITS, "0", "9"]), min_size=1, max_size=4).map(
            "".join
        ),
        st.sampled_from("jJAaxuNntsbqe%"),
    ),
    st.text(max_size=300),
)
states = st.sampled_from(list(JobState))
output_kinds = st.sampled_from(
    ["bytes", "fifo", "socket", "dir", "zero", "loop", "dev", "sparse", "missing"]
)


# ---------------------------------------------------------------------------- handlers
class Tally:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.crashes: Counter[str] = Counter()
        self.good_job_missed = 0
        self.slow = 0
        self.first_crash: str | None = None

    def run(self, kind: str, handler: Any, *args: Any) -> Any:
        self.counts[kind] += 1
        started, started_cpu = time.monotonic(), cpu_s()
        try:
            return handler(*args)
        except Exception as exc:  # what would have escaped into a loop
            self.crashes[kind] += 1
            self.first_crash = self.first_crash or f"{kind}: {exc!r}"[:300]
            return None
        finally:
            if too_slow(time.monotonic() - started, cpu_s() - started_cpu):
                self.slow += 1


def batches(*parts: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """``BATCH`` generated inputs an example, each a tuple drawn from ``parts``."""
    return st.lists(st.tuples(*parts), min_size=BATCH, max_size=BATCH)


def _job(job_id: str, comment: str, state: JobState, partition: str = "batch") -> JobInfo:
    return JobInfo(job_id=job_id, state=state, comment=comment, partition=partition, nodes=["n1"])


class Follower:
    """Job-owned outputs of each kind, in a scratch directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        os.mkfifo(root / "fifo")
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(root / "socket"))
        (root / "dir").mkdir()
        (root / "zero").symlink_to("/dev/zero")
        (root / "loop").symlink_to(root / "loop")
        with open(root / "sparse", "wb") as handle:
            handle.seek(1 << 40)
            handle.write(b"end\n")
        self.paths = {
            "fifo": root / "fifo",
            "socket": root / "socket",
            "dir": root / "dir",
            "zero": root / "zero",
            "loop": root / "loop",
            "dev": Path("/dev/zero"),
            "sparse": root / "sparse",
            "missing": root / "missing",
        }

    def read(self, kind: str, data: bytes) -> None:
        if kind == "bytes":
            path = self.root / "bytes"
            path.write_bytes(data)
        else:
            path = self.paths[kind]
        followed = FollowedFile(str(path), owner_uid=os.getuid())
        for _ in range(3):
            followed.read_new_lines()


def run(inputs: int) -> dict[str, Any]:
    tally = Tally()
    watcher = SlurmWatcher(scheduler=None, config=CONFIG, report=None)  # type: ignore[arg-type]
    nodes = [NodeInfo(name="n1", state="DOWN")]
    good = _job("7", '{"resurrect": {}}', JobState.NODE_FAIL)
    per_kind = max(1, inputs // (4 * BATCH))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fuzz-untrusted-") as tmp:
        follower = Follower(Path(tmp))
        common = settings(
            max_examples=per_kind,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )

        @common
        @given(batches(comments, st.sampled_from(["batch", "gpu"])))
        def fuzz_comments(batch: list[tuple[str, str]]) -> None:
            for comment, partition in batch:
                tally.run(
                    "comment",
                    resolve_job_policy,
                    _job("1", comment, JobState.RUNNING, partition),
                    CONFIG,
                )

        @common
        @given(batches(patterns, st.sampled_from(["standard_output", "standard_error"])))
        def fuzz_patterns(batch: list[tuple[str, str]]) -> None:
            for pattern, field in batch:
                doc = dict(SQUEUE)
                doc["jobs"] = [dict(SQUEUE["jobs"][0], **{field: pattern}), *SQUEUE["jobs"][1:]]
                tally.run("pattern", parse_jobs, doc)

        @common
        @given(batches(comments, states, patterns))
        def fuzz_watcher(batch: list[tuple[str, JobState, str]]) -> None:
            for index in range(0, BATCH, 2):  # two hostile jobs and the good one per round
                hostile = [
                    _job(str(100 + n), c, s).model_copy(update={"stdout_path": p})
                    for n, (c, s, p) in enumerate(batch[index : index + 2])
                ]
                found = tally.run("watcher", watcher.detect, [*hostile, good], nodes)
                tally.counts["watcher"] += len(hostile) - 1
                if found is not None and "7" not in {i.job_id for i in found}:
                    tally.good_job_missed += 1

        @common
        @given(batches(output_kinds, st.binary(max_size=2000)))
        def fuzz_follower(batch: list[tuple[str, bytes]]) -> None:
            for kind, data in batch:
                tally.run("follower", follower.read, kind, data)

        for fuzz in (fuzz_comments, fuzz_patterns, fuzz_watcher, fuzz_follower):
            fuzz()
        follower.sock.close()
    elapsed = time.perf_counter() - started
    total = sum(tally.counts.values())
    return {
        "benchmark": "fuzz_untrusted_input",
        "inputs": total,
        "loop_crashes": sum(tally.crashes.values()),
        "good_job_missed": tally.good_job_missed,
        "slow": tally.slow,
        "by_handler": dict(tally.counts),
        "crashes_by_handler": dict(tally.crashes),
        "first_crash": tally.first_crash,
        "seconds": round(elapsed, 1),
        "inputs_per_s": round(total / elapsed),
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--parser-inputs", type=int, default=20_000, help="per parser")
    parser.add_argument("--seed", type=int, default=20)
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the handlers' notes: counted, not printed
    print_result(run(args.inputs), as_json=args.json)
    for result in run_parsers(args.parser_inputs, seed=args.seed):
        print_result(result, as_json=args.json)
    for result in run_job_records(args.parser_inputs, seed=args.seed):
        print_result(result, as_json=args.json)
    print_result(run_kernel_records(args.parser_inputs, seed=args.seed), as_json=args.json)
    return 0


# ---------------------------------------------------------------------------- parsers (issue 20)
FLIGHT_RECORDER = REPO / "tests" / "fixtures" / "flight_recorder"
STACK_TEXTS = sorted((REPO / "tests" / "fixtures" / "stacks").glob("*.txt"))
LIVENESS_KEY = b"k" * 32
HASH_MODULUS = (1 << 61) - 1
# The former py-spy frame pattern (backtracking), the baseline of ``pyspy_text``.
FORMER_FRAME = re.compile(r"^\s{2,}(?P<function>.{1,1000}?) \((?P<where>[^()]{1,1000})\)\s*$")
_VALUES: list[Any] = [
    None, True, False, 0, -1, 7, 2**63, -(2**70), 1e308, float("nan"), "", "0", "started",
    "nccl:all_reduce", "\x1b]0;t\x07", "\ud800", [], {}, [1, [2]], {"a": 1}, "x" * 300,
]  # fmt: skip
_FIELDS = ["pg_id", "collective_seq_id", "profiling_name", "state", "entries", "frames", "x"]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    """``data`` with a few random byte flips, insertions, deletions or a cut."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        choice = rng.random()
        at = rng.randrange(len(out) + 1)
        if choice < 0.4 and out:
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif choice < 0.7:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif choice < 0.9:
            del out[at : at + rng.randint(1, 16)]
        else:
            del out[at:]
    return bytes(out)


def _value(rng: random.Random, depth: int = 0) -> Any:
    if depth > 3 or rng.random() < 0.6:
        return rng.choice(_VALUES)
    if rng.random() < 0.5:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(_FIELDS): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _entry(rng: random.Random) -> dict[str, Any]:
    entry = {name: _value(rng) for name in rng.sample(_FIELDS[:4], rng.randint(0, 4))}
    if rng.random() < 0.6:
        entry["collective_seq_id"] = rng.choice([rng.randint(-5, 10**6), 2**63, 1])
        entry["pg_id"] = rng.choice([0, 1, str(rng.randint(0, 2000)), "\x1b[2K"])
    return entry


def _document(rng: random.Random) -> Any:
    if rng.random() < 0.1:
        return _value(rng)
    return {"version": "2.10", "entries": [_entry(rng) for _ in range(rng.randint(0, 30))]}


def flight_recorder_json_inputs(rng: random.Random) -> bytes:
    real = [p.read_bytes() for p in sorted(FLIGHT_RECORDER.glob("*.json"))]
    kind = rng.random()
    if kind < 0.45:
        return json.dumps(_document(rng), allow_nan=True).encode("utf-8", "surrogatepass")
    if kind < 0.85:
        return _mutate(rng, rng.choice(real))
    size = rng.randint(1, 50_000)
    return rng.choice(
        [
            b"[" * size + b"]" * size,
            b'{"entries": []}',
            b'{"entries": [{"collective_seq_id": ' + b"9" * size + b"}]}",
            b'{"entries": ['
            + b",".join(b'{"collective_seq_id":1,"pg_id":%d}' % n for n in range(size // 20))
            + b"]}",
            b'{"entries": "' + b"\\u0000" * (size // 6) + b'"}',
        ]
    )


def colliding_keys_pickle(keys: int) -> bytes:
    """A pickle of a dict whose ``keys`` integer keys all hash alike (written opcode by
    opcode: building the dict here would cost what the attack costs)."""
    items = b"".join(
        b"\x8a\x0a" + (HASH_MODULUS * k + 7).to_bytes(10, "little", signed=True) + b"K\x00"
        for k in range(1, keys + 1)
    )
    return b"\x80\x04}\x8c\x07entries]s\x8c\x09pg_status}(" + items + b"us."


_OPCODES = [
    bytes([code])
    for code in b"().0123NIJKLMFGX\x8c\x8dV}]dlsuaet\x85\x86\x87qrh\x94jgpcR\x93"
    + b"bBC\x8f\x90\x91\x92\x95\x96\x97\x98\x81\x82\x83\x84\x88\x89\x8a\x8bPQSTU"
]


def flight_recorder_pickle_inputs(rng: random.Random) -> bytes:
    real = [p.read_bytes() for p in sorted(FLIGHT_RECORDER.glob("*.pkl"))]
    kind = rng.random()
    if kind < 0.3:
        doc = _document(rng)
        if rng.random() < 0.3:  # what a plain reader refuses
            doc = {"entries": [rng.choice([{1, 2}, b"raw", {3: "k"}, frozenset(), (1, {})])]}
        return pickle.dumps(doc, protocol=rng.randint(0, 5))
    if kind < 0.7:
        return _mutate(rng, rng.choice(real))
    if kind < 0.95:
        soup = b"".join(
            rng.choice(_OPCODES) + bytes(rng.randrange(256) for _ in range(rng.randint(0, 9)))
            for _ in range(rng.randint(1, 60))
        )
        return b"\x80\x04" + soup + b"."
    return colliding_keys_pickle(rng.randint(10, 4000))


_SPY_LINES = [
    "Process 9002: /usr/bin/python3 -u train.py", "Python v3.11.2 (/usr/bin/python3.11)",
    'Thread 9002 (idle): "MainThread"', "Thread 0x7F (active+gil)", "    main (train.py:248)",
    "    pthread_cond_wait (libc.so.6)", "  f (", "  ) (", "(((", '"', "\x1b[2K", "\t\t",
]  # fmt: skip


def pyspy_inputs(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        text = rng.choice(STACK_TEXTS).read_text()
        return _mutate(rng, text.encode()).decode("utf-8", "replace")
    if kind < 0.8:
        return "\n".join(rng.choice(_SPY_LINES) for _ in range(rng.randint(1, 200)))
    run = rng.randint(1, 16_384)
    return rng.choice(
        [
            " " * run,
            "\t" * run,
            "  f " + "(" * run,
            "  f (" + " " * run + ")",
            "  " + " (" * (run // 2) + "x)",
            "Thread " + "1" * run,
            "Process 1: " + "x" * run,
        ]
    )


def hold_mark_inputs(rng: random.Random) -> str:
    parts = [
        "resurrect-hold:",
        "resurrect-h",
        "old:",
        str(rng.randint(0, 10**20)),
        " ",
        "AdminComment=",
        "\n",
        "x",
        "resurrect-hold:1",
        "\u00a0",
        "9" * 13,
        "\x00",
    ]
    if rng.random() < 0.1:
        return "resurrect-hold:" * rng.randint(1, 2000) + "1"
    return "".join(rng.choice(parts) for _ in range(rng.randint(0, 40)))


def liveness_inputs(rng: random.Random) -> bytes:
    from resurrect.sensors.liveness.wire import Beat, seal

    now = datetime.now(UTC)
    beat = Beat(cluster="c", node="n1", instance="i-1", seq=rng.randint(0, 10**6), sent_at=now)
    kind = rng.random()
    if kind < 0.05:
        return seal(LIVENESS_KEY, beat)  # a genuine beat: accepted
    if kind < 0.3:
        return _mutate(rng, seal(LIVENESS_KEY, beat))
    if kind < 0.6:  # a key holder's forged body: it reaches the JSON parser
        body = json.dumps(
            {
                "kind": "beat",
                "cluster": "c",
                "node": _value(rng),
                "instance": _value(rng),
                "seq": rng.choice([0, -1, 10**30, "1"]),
                "sent_at": rng.choice([now.isoformat(), "9999-12-31T00:00:00", "", 0]),
                "silence_threshold_s": rng.choice([0.001, 0, -1, 1e308, 6.0]),
            }
        ).encode("utf-8", "surrogatepass")[:1900]
        node = rng.choice(["n1", "n2", "", "n1\nx", "\udcff", "a" * 300])
        signed = node.encode("utf-8", "surrogatepass") + b"\n" + body
        return signed + b"\n" + hmac.new(LIVENESS_KEY, signed, hashlib.sha256).hexdigest().encode()
    if kind < 0.9:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 2100)))
    return b"{" * 1900 + b"\n" + b"0" * 64


class ParserTally:
    """One parser's run: inputs, typed refusals, crashes, and its costliest input."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.inputs = self.refused = self.crashes = self.slow = 0
        self.first_crash: str | None = None
        self.worst_s = 0.0
        self.worst: Any = b""
        self.total_s = 0.0

    def call(self, handler: Any, value: Any, typed: tuple[type[BaseException], ...]) -> None:
        self.inputs += 1
        started, started_cpu = time.perf_counter(), cpu_s()
        try:
            handler(value)
        except typed:
            self.refused += 1
        except Exception as exc:  # anything else would escape into a service loop
            self.crashes += 1
            self.first_crash = self.first_crash or f"{exc!r}"[:300]
        took = time.perf_counter() - started
        self.total_s += took
        self.slow += too_slow(took, cpu_s() - started_cpu)
        if took > self.worst_s:
            self.worst_s, self.worst = took, value

    def result(self, **extra: Any) -> dict[str, Any]:
        worst = self.worst if isinstance(self.worst, str) else bytes(self.worst)
        return {
            "benchmark": f"fuzz_untrusted_input.{self.name}",
            "inputs": self.inputs,
            "refused_typed": self.refused,
            "crashes": self.crashes,
            "slow": self.slow,
            "first_crash": self.first_crash,
            "worst_s": round(self.worst_s, 4),
            "worst_input": {"size": len(worst), "starts": repr(worst[:60])},
            "inputs_per_s": round(self.inputs / self.total_s) if self.total_s else None,
            **extra,
        }


def _former_unpickle(raw: bytes) -> float:
    """The former reader: the standard unpickler (with PyTorch's tags allowed)."""
    started = time.perf_counter()
    try:
        pickle.loads(raw)
    except Exception:  # the former reader's refusals: only its time matters here
        pass
    return time.perf_counter() - started


def _former_pyspy(text: str) -> float:
    started = time.perf_counter()
    for line in text[: 1 << 20].splitlines():
        FORMER_FRAME.match(line)
    return time.perf_counter() - started


def _ratio(former: float, now: float) -> float | None:
    return round(former / now, 1) if now > 0 else None


def run_parsers(
    inputs: int, *, seed: int = 20, helper_sample: int | None = None
) -> list[dict[str, Any]]:
    """Each issue-20 parser on ``inputs`` seeded, generated inputs; one result each."""
    from resurrect.errors import JobFileRefused
    from resurrect.scheduler.hold_marker import has_marker, read_mark, unmarked
    from resurrect.sensors.liveness.wire import WireError, open_beat
    from resurrect.stacks.flight_recorder import read_flight_record
    from resurrect.stacks.flight_recorder_dump import parse_dump
    from resurrect.stacks.pyspy_text import bounded_dump_text, parse_pyspy_dump

    rng = random.Random(seed)
    results: list[dict[str, Any]] = []

    def parse(raw: bytes) -> None:
        parse_dump("fuzz", raw)

    for name, make in (
        ("flight_recorder_json", flight_recorder_json_inputs),
        ("flight_recorder_pickle", flight_recorder_pickle_inputs),
    ):
        tally = ParserTally(name)
        for _ in range(inputs):
            tally.call(parse, make(rng), (JobFileRefused,))
        extra: dict[str, Any] = {}
        if name == "flight_recorder_pickle":
            attack = colliding_keys_pickle(8000)
            now_tally = ParserTally("attack")
            now_tally.call(parse, attack, (JobFileRefused,))
            former = _former_unpickle(attack)
            extra = {
                "attack": "8,000 colliding integer keys",
                "attack_s": round(now_tally.worst_s, 4),
                "former_s": round(former, 3),
                "ratio": _ratio(former, now_tally.worst_s),
            }
        results.append(tally.result(**extra))

    tally = ParserTally("flight_recorder_helper")
    with tempfile.TemporaryDirectory(prefix="fuzz-fr-") as tmp:
        path = Path(tmp) / "nccl_trace_rank_0"

        def through_helper(raw: bytes) -> None:
            path.write_bytes(raw)
            read_flight_record(path, 0, os.getuid())

        makers = [flight_recorder_json_inputs, flight_recorder_pickle_inputs]
        for number in range(helper_sample if helper_sample is not None else max(20, inputs // 200)):
            raw = colliding_keys_pickle(32_000) if number == 0 else rng.choice(makers)(rng)
            tally.call(through_helper, raw, (JobFileRefused,))
    results.append(tally.result())

    tally = ParserTally("pyspy_text")

    def spy(text: str) -> None:
        parse_pyspy_dump(text)
        bounded_dump_text(text, 4096)

    for _ in range(inputs):
        tally.call(spy, pyspy_inputs(rng), ())
    worst = tally.worst if isinstance(tally.worst, str) else ""
    whitespace = "\n".join([" " * 8192] * 16)  # 128 KiB of whitespace lines
    spaced = ParserTally("spaces")
    spaced.call(spy, whitespace, ())
    former = _former_pyspy(whitespace)
    results.append(
        tally.result(
            former_s_on_worst=round(_former_pyspy(worst), 4),
            attack="16 lines of 8 KiB of spaces",
            attack_s=round(spaced.worst_s, 4),
            former_s=round(former, 3),
            ratio=_ratio(former, spaced.worst_s),
        )
    )

    tally = ParserTally("hold_mark")

    def hold(comment: str) -> None:
        read_mark(comment, key=LIVENESS_KEY, job_id="7", now=time.time())
        has_marker(comment)
        unmarked(comment)

    for _ in range(inputs):
        tally.call(hold, hold_mark_inputs(rng), ())
    results.append(tally.result())

    tally = ParserTally("liveness_datagram")
    for _ in range(inputs):
        tally.call(
            lambda d: open_beat(lambda node: LIVENESS_KEY, d), liveness_inputs(rng), (WireError,)
        )
    results.append(tally.result())
    return results


# -------------------------------------------------------------------- job records (issue 33)
JOB_FIXTURES = REPO / "tests" / "fixtures"
_HOSTILE: list[Any] = [
    *NON_ASCII_DIGITS, *(f"-{d}" for d in NON_ASCII_DIGITS), " 12", "1_0", "+3", "0x10", "",
    None, True, 0, -1, 2**64, -(2**70), 10**400, float("nan"), float("inf"), 1e308, "(null)",
    "%²j", "%0²A_%٣a", "%99999999999999999999j", "%", "\\%j", "\x00", "\ud800", "a\nb",
    {"set": True, "number": "²"}, {"set": True, "number": float("nan")}, {"infinite": True},
    {"number": None}, {"set": "yes", "number": 10**30}, [], [None, "²"], {"x": {}},
]  # fmt: skip


def recorded_job_records() -> list[dict[str, Any]]:
    """Every job record of the recorded CLI JSON and slurmrestd answers, every version."""
    found: list[Any] = []
    for path in sorted((JOB_FIXTURES / "slurm-json").rglob("*.json")):
        found += json.loads(path.read_text()).get("jobs") or []
    for path in sorted((JOB_FIXTURES / "slurm-rest").rglob("job*.json")):
        found += json.loads(json.loads(path.read_text())["body"]).get("jobs") or []
    return [job for job in found if isinstance(job, dict) and "job_id" in job]


def _hostile_value(rng: random.Random) -> Any:
    kind = rng.random()
    if kind < 0.5:
        return rng.choice(_HOSTILE)
    if kind < 0.8:  # an output pattern built of codes, widths of any script and text
        pieces = ["%", "%%", "\\", "/", "j", "A", "a", "b", "x", "N", *NON_ASCII_DIGITS, "7"]
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
    return _value(rng)


def with_hostile_field(rng: random.Random, record: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``record`` with one field, or one below it, set to a hostile value."""
    import copy

    record = copy.deepcopy(record)
    node: Any = record
    for _ in range(rng.randint(1, 3)):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        key = rng.choice(keys)
        if not isinstance(node[key], dict | list) or not node[key] or rng.random() < 0.5:
            node[key] = _hostile_value(rng)
            break
        node = node[key]
    return record


def run_job_records(
    inputs: int, *, seed: int = 20, poll_sample: int | None = None
) -> list[dict[str, Any]]:
    """``job_record`` on ``inputs`` seeded records and ``job_record_poll`` on a sample."""
    import asyncio

    from resurrect.scheduler.slurm_json import stepd_naming

    rng = random.Random(seed)
    records = recorded_job_records()
    namings = [stepd_naming(v) for v in (None, (22, 5), (24, 11), (26, 5))]
    tally = ParserTally("job_record")
    lost = 0

    def read(doc: dict[str, Any]) -> None:
        nonlocal lost
        jobs = parse_jobs(doc, rng.choice(namings))
        lost += "424242" not in {job.job_id for job in jobs}

    for _ in range(inputs):
        record = rng.choice(records)
        other = dict(record, job_id=424242)
        tally.call(read, {"jobs": [with_hostile_field(rng, record), other]}, ())
    tally.worst = repr(tally.worst)[:2000]
    results = [tally.result(records=len(records), other_lost=lost)]

    polls = ParserTally("job_record_poll")
    missed = 0

    def poll(make: Any) -> None:
        nonlocal missed
        found = asyncio.run(make())
        missed += not found

    with tempfile.TemporaryDirectory(prefix="fuzz-jobs-") as tmp:
        token = Path(tmp) / "token"
        token.write_text("SLURM_JWT=header.payload.signature\n")
        token.chmod(0o600)
        for number in range(poll_sample if poll_sample is not None else max(40, inputs // 100)):
            make = _rest_poll if number % 2 else _cli_poll
            polls.call(poll, _bound_poll(make, rng, token), ())
    polls.worst = ""  # a coroutine factory: its input is the seeded record, not shown
    results.append(polls.result(other_missed=missed))
    return results


def _bound_poll(make: Any, rng: random.Random, token: Path) -> Any:
    """A coroutine factory: one watcher poll with one hostile job, True when the other
    user's failed job was reported."""
    value_rng = random.Random(rng.random())
    return lambda: make(value_rng, token)


async def _reported(scheduler: Any) -> list[str]:
    reported: list[str] = []

    async def report(interruption: Any) -> str:
        reported.append(interruption.job_id)
        return str(interruption.workflow_id)

    await SlurmWatcher(scheduler, CONFIG_OPT_IN, report).poll_once()
    return reported


async def _rest_poll(rng: random.Random, token: Path) -> bool:
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from support.slurm_rest_synthetic import SyntheticRestd

    from resurrect.scheduler.slurm_rest import SlurmRest
    from resurrect.scheduler.slurm_rest_client import RestClient

    restd = SyntheticRestd(jobs=4, running=2, failed=1, nodes=4)
    for job in restd.jobs.values():
        job["comment"] = '{"resurrect": {}}'
    restd.jobs["1000"] = with_hostile_field(rng, restd.jobs["1000"])
    import httpx

    try:  # what the synthetic server cannot render as JSON, no slurmrestd would send
        restd.handle(httpx.Request("GET", "http://x/slurm/v0.0.45/job/1000"))
    except (ValueError, TypeError):
        return True
    client = RestClient("unix:/nonexistent", token, transport=restd.transport())
    return "1002" in await _reported(SlurmRest("c1", client, verify_timeout=1.0))


async def _cli_poll(rng: random.Random, token: Path) -> bool:
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from support.slurm_text import SlurmText

    from resurrect.scheduler.slurm_cli import SlurmCli
    from resurrect.scheduler.slurm_exec import CommandResult, CommandRunner

    def running(job_id: int, state: str) -> dict[str, Any]:
        return {
            "job_id": job_id, "job_state": state, "name": "train", "user_name": "alice",
            "user_id": 1001, "group_id": 1001, "partition": "gpu", "nodes": "gpu[001-002]",
            "node_count": 2, "restart_cnt": 0, "priority": 100,
            "comment": '{"resurrect": {}}', "standard_output": "/home/alice/out-%j.log",
            "current_working_directory": "/home/alice", "start_time": 1795981300,
        }  # fmt: skip

    hostile = running(5, "RUNNING")
    key = rng.choice(sorted(hostile))
    hostile[key] = _hostile_value(rng)
    text = SlurmText([hostile, running(6, "NODE_FAIL")], [], major=rng.choice([22, 24]))
    version = "slurm 22.05.8" if text.major == 22 else "slurm 24.11.5"

    class Runner(CommandRunner):
        async def run(self, argv: Any, *, timeout: float | None = None) -> CommandResult:
            if tuple(argv) == ("scontrol", "--version"):
                return CommandResult(tuple(argv), 0, version, "")
            try:
                answer = text.answer(argv)
            except (ValueError, TypeError, OverflowError, OSError, KeyError):
                answer = (1, "", "the stand-in cannot print this value")
            return CommandResult(tuple(argv), *(answer or (0, "", "")))

    sched = SlurmCli("c1", "/nonexistent/slurm.conf")
    sched.runner = Runner()
    try:
        return "6" in await _reported(sched)
    except Exception as exc:  # the one squeue of the view failed: the stand-in's limit
        if "stand-in" in str(exc):
            return True
        raise


CONFIG_OPT_IN = ResurrectConfig.model_validate({"cluster": {"name": "c1"}})


def run_kernel_records(inputs: int, *, seed: int = 20) -> dict[str, Any]:
    """``kernel_record`` on ``inputs`` seeded records (half forged formats, half writes
    of driver text to /dev/kmsg)."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from support.kernel_records import forged_kmsg_record, written_to_kmsg

    from resurrect.sensors.node_agent.kernel_log import driver_message, kmsg_record

    rng = random.Random(seed)
    gpus = {"0000:48:00"}
    tally = ParserTally("kernel_record")
    accepted = 0

    def read(record: str) -> None:
        nonlocal accepted
        parsed = kmsg_record(record)
        accepted += parsed is not None and driver_message(parsed, gpus) is not None

    for number in range(inputs):
        make = forged_kmsg_record if number % 2 else written_to_kmsg
        tally.call(read, make(rng, "0000:48:00"), ())
    return tally.result(forged_accepted=accepted)


if __name__ == "__main__":
    raise SystemExit(main())
