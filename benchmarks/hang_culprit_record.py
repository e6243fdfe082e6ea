"""Hang-culprit record: the cost of recording one hang with a full record on disk, before
and after (issue 20 item 8).

* ``before`` (the baseline, measured in the same run): what the follower did until issue
  20, reproduced here: every culprit name of a hang, whatever it was, remembered and the
  whole record rewritten as one JSON object (new file, rename) after each name.
* ``after``: :meth:`resurrect.progress.hang_culprits.HangCulprits.implicate` as the follower
  calls it: names not among the job's nodes refused (one note), each recorded node one
  appended line.

Both start from the same full record (``--records`` records of other jobs) and take the
same hostile hangs (``--hangs`` hangs naming ``--names`` invented 250-character nodes; the
baseline takes two of them, its cost per hang being the same each time) and one honest hang
naming its one node.

    python benchmarks/hang_culprit_record.py [--records 50000] [--hangs 40] [--json]
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

from _common import benchmark_parser, print_result

from resurrect.checkpoint.atomic import write_new_then_rename
from resurrect.progress.hang_culprits import HangCulprits

WINDOW_S = 7 * 24 * 3600.0


class WholeFileRecord:
    """The former record: node -> {job: time}, the whole file rewritten at every name."""

    def __init__(self, path: Path, nodes: OrderedDict[str, dict[str, float]]) -> None:
        self.path = path
        self.nodes = nodes

    def record(self, node: str, job_id: str, now: float) -> None:
        jobs = self.nodes.setdefault(node, {})
        self.nodes.move_to_end(node)
        jobs[job_id] = now
        while len(self.nodes) > 10_000:
            self.nodes.popitem(last=False)
        write_new_then_rename(self.path, json.dumps(self.nodes).encode(), mode=0o600)


def full_record(records: int) -> list[tuple[str, str]]:
    """(node, job) pairs: ``records`` records of other jobs, 5 jobs per node, each job the
    culprit of one hang."""
    return [(f"gpu-{n // 5:05d}", str(100_000 + n)) for n in range(records)]


def run(records: int, hangs: int, names: int) -> dict[str, object]:
    invented = [f"{n:03d}-" + "x" * 250 for n in range(names)]
    pairs = full_record(records)
    with tempfile.TemporaryDirectory() as tmp:
        nodes: OrderedDict[str, dict[str, float]] = OrderedDict()
        for node, job in pairs:
            nodes.setdefault(node, {})[job] = 1.0
        before = WholeFileRecord(Path(tmp) / "before.json", nodes)
        baseline_hangs = min(hangs, 2)  # seconds per hang: two are enough to measure
        began = time.perf_counter()
        for _ in range(baseline_hangs):
            for name in invented:
                before.record(name, "666", 2.0)
        before.record("gpu-00001", "500", 3.0)
        before_s = time.perf_counter() - began

        after = HangCulprits(WINDOW_S, Path(tmp) / "after.json")
        for node, job in pairs:
            after.record(node, job, 1.0, job_nodes=[node])
        began = time.perf_counter()
        notes = 0
        for _ in range(hangs):
            notes += len(after.implicate("666", invented, ["node1", "node2"], 2.0)[1])
        after.implicate("500", ["gpu-00001"], ["gpu-00001"], 3.0)
        after_s = time.perf_counter() - began
        kept = sum(1 for node, job in pairs[:1000] if job in after.jobs(node, 4.0))
    per_hang_before = before_s / (baseline_hangs + 1)
    per_hang_after = after_s / (hangs + 1)
    return {
        "benchmark": "hang_culprit_record",
        "records": records,
        "hangs": hangs,
        "names_per_hang": names,
        "before_s_per_hang": round(per_hang_before, 4),
        "after_s_per_hang": round(per_hang_after, 6),
        "speedup": round(per_hang_before / max(per_hang_after, 1e-9), 1),
        "notes_for_the_hostile_job": notes,
        "other_jobs_records_kept_of_first_1000": kept,
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--hangs", type=int, default=40)
    parser.add_argument("--names", type=int, default=256)
    args = parser.parse_args(argv)
    print_result(run(args.records, args.hangs, args.names), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
