"""What every benchmark shares: its command line and how it prints its result.

Each benchmark is run as a script (``python benchmarks/NAME.py [--json]``), so this module is
imported as a sibling (``from _common import ...``: the script's folder is on ``sys.path``).
Importing it puts the tests' folder on ``sys.path`` too, so benchmarks share the harness of
``tests/support`` (the in-memory clusters, worker processes, Slurm text) with the tests.

* :func:`benchmark_parser`: the argument parser, described by the first line of the
  benchmark's docstring, with the ``--json`` switch every benchmark takes.
* :func:`print_result`: the result as one JSON line (``--json``, what ``run_all.sh``
  collects), or one aligned ``key value`` line per field for a person.
* :func:`machine_loop_s`: how fast the machine runs Python now (a fixed loop's CPU seconds),
  beside a figure that moves with it: a shared machine slows by tens of percent for minutes.

A benchmark's ``main`` is then::

    def main(argv: list[str] | None = None) -> int:
        parser = benchmark_parser(__doc__)
        parser.add_argument("--jobs", type=int, default=1000)
        args = parser.parse_args(argv)
        print_result(asyncio.run(run(args)), as_json=args.json)
        return 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"
if str(TESTS) not in sys.path:
    sys.path.append(str(TESTS))


def benchmark_parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser described by ``doc``'s first line, with ``--json``."""
    summary = doc.strip().splitlines()[0] if doc and doc.strip() else None
    parser = argparse.ArgumentParser(description=summary)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    return parser


# The loop :func:`machine_loop_s` times: about 0.1 CPU-s on the 2-core development machine.
CALIBRATION_ITERATIONS = 3_000_000


def machine_loop_s() -> float:
    """CPU seconds of a fixed pure-Python loop in this process, now: how fast this machine
    runs Python at the moment. Timed before and after a measurement, it tells a run that was
    slow because the machine was (a neighbour's load, a slower core) from one that was slow
    because the code was: the CPU seconds of a recovery move with it in proportion."""
    started = time.process_time()
    total = 0
    for i in range(CALIBRATION_ITERATIONS):
        total += i * i
    assert total > 0
    return round(time.process_time() - started, 4)


def print_result(result: Mapping[str, Any], *, as_json: bool, summary: str | None = None) -> None:
    """Print ``result``: one JSON line, or (for a person) ``summary``, the benchmark's reading
    in one sentence, then one ``key value`` line per field, aligned."""
    if as_json:
        print(json.dumps(result))
        return
    if summary:
        print(summary)
    width = max((len(key) for key in result), default=0)
    for key, value in result.items():
        print(f"{key:{width}}  {value}")
