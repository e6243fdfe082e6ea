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
reported; ``slow`` counts inputs that took more than 1 s. All must be 0. The baseline is
the same inputs' count, and the rate is inputs per second.

    python benchmarks/fuzz_untrusted_input.py [--inputs 100000] [--json]
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import time
from collections import Counter
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
SLOW_S = 1.0

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
patterns = st.one_of(
    st.text(alphabet=st.sampled_from([*"%jJAaxuNntsb%\\/.-_e", "\x00", "é"]), max_size=200),
    st.builds(
        lambda w, c: f"/out/%{w}{c}.log", st.integers(0, 10**30), st.sampled_from("jJAaxuNntsbqe%")
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
        started = time.monotonic()
        try:
            return handler(*args)
        except Exception as exc:  # what would have escaped into a loop
            self.crashes[kind] += 1
            self.first_crash = self.first_crash or f"{kind}: {exc!r}"[:300]
            return None
        finally:
            if time.monotonic() - started > SLOW_S:
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
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the handlers' notes: counted, not printed
    print_result(run(args.inputs), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
