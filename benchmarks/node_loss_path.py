"""The files a reader holds to follow one node loss from the Slurm watcher to scontrol.

Runs the live end-to-end test of a node loss (``tests/e2e/test_recovery_on_slurm.py::
test_node_loss_drains_that_node_requeues_and_completes``: the real local Slurm cluster and
Temporal dev server, as root, the recovery in act mode) with this file as a pytest plugin
that traces every Python function entered from the moment the node is killed until the
recovery's outcome is read, each with its nearest product caller. The path is what is
reachable from its roots: the watcher's loop (``SlurmWatcher.run``), the recovery workflow
(``RecoveryWorkflow.run`` and its ``report`` signal), every workflow entry Temporal runs
meanwhile (the drain budget's update, the node repair's signals and run, through the
telemetry interceptor), the activities Temporal runs, and the tasks the recovery's clients
start (scheduler calls, the budget and repair clients' batches). Nothing on the way is cut:
approvals, the approval gate, the budget client and its workflow, the repair client, lemons,
telemetry and goodput count wherever the node loss enters them. What runs beside it and is
not reached from those roots (the log follower's polls, the metric publishers) does not.
A file counts when a function of it is entered on the path, unless it is a contract (data:
``data_files``). ``by_folder`` counts the files per folder. Not in ``run_all.sh``: it
measures structure, not speed, and needs the live cluster.

Whether the job's output holds a line the rules match when it is read (srun's report of
the lost node) varies from run to run, and with it whether log attribution is on the path:
``--runs`` unites the paths of several runs; ``--keep-traces DIR`` keeps each run's call
edges and ``--from-traces FILE...`` analyses kept ones without running the test.

    python benchmarks/node_loss_path.py [--json] [--show-functions] [--runs N]
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from _common import benchmark_parser, print_result

ROOT = Path(__file__).resolve().parents[1]
NODE_LOSS_TEST = (
    "tests/e2e/test_recovery_on_slurm.py::test_node_loss_drains_that_node_requeues_and_completes"
)
# The test's own harness: never the product's path.
HARNESS = ("resurrect/demo/", "tests/")
# The product's folders: a file elsewhere (a virtual environment below the root, a library)
# is never counted.
PRODUCT_DIRS = ("resurrect/", "activities/", "workers/", "sensors/", "workflows/")
# Entered on the path, but data: not counted.
DATA_FILES = ("resurrect/contracts/",)
ROOTS = (
    "sensors/slurm_watcher.py::SlurmWatcher.run",
    "workflows/recovery.py::RecoveryWorkflow.run",
    "workflows/recovery.py::RecoveryWorkflow.report",
)
# Temporal's callers of workflow code (init, run, signals, updates, queries, conditions)
# and of activities.
WORKFLOW_CALLERS = (
    "EXT:temporalio/worker/_workflow_instance.py::",
    "EXT:temporalio/worker/_interceptor.py::WorkflowInboundInterceptor",
)
# Call chains that begin anew in a task or thread: the recovery's activities, its scheduler
# calls, and the batches the budget and repair clients send.
TASK_ROOTS = (
    "activities/",
    "resurrect/scheduler/",
    "resurrect/operator/budget_client.py",
    "resurrect/operator/repair_client.py",
)
# Frames where a call chain begins anew (a task step, a thread's work item).
CHAIN_STARTS = ("asyncio/events.py", "concurrent/futures/thread.py")
ACTIVITY_CALLER = "EXT:temporalio/worker/_interceptor.py::ActivityInboundInterceptor"


# ---------------------------------------------------------------- the pytest plugin
class _Trace:
    """Call edges (nearest product caller -> product function) while ``active``."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.active = False
        self.edges: collections.Counter[tuple[str, str]] = collections.Counter()
        self._paths: dict[str, str | None] = {}

    def _key(self, frame: FrameType) -> str | None:
        filename = frame.f_code.co_filename
        if filename not in self._paths:
            real = os.path.realpath(filename)
            rel = os.path.relpath(real, ROOT)
            inside = rel.startswith(PRODUCT_DIRS)  # not a venv or a library below the root
            self._paths[filename] = rel if inside else None
        rel = self._paths[filename]
        return None if rel is None else f"{rel}::{frame.f_code.co_qualname}"

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.active or event != "call":
            return
        callee = self._key(frame)
        if callee is None or callee.endswith("::<module>"):
            return
        caller, outside, back = None, None, frame.f_back
        while back is not None:
            caller = self._key(back)
            if caller is not None or back.f_code.co_filename.endswith(CHAIN_STARTS):
                break
            if outside is None:
                site = back.f_code.co_filename.rsplit("/site-packages/", 1)[-1]
                outside = f"EXT:{site}::{back.f_code.co_qualname}"
            back = back.f_back
        self.edges[(caller or outside or "EXT:?", callee)] += 1

    def start(self) -> None:
        self.active = True

    def stop(self) -> None:
        self.active = False
        edges = [[a, b, n] for (a, b), n in sorted(self.edges.items())]
        self.out.write_text(json.dumps({"edges": edges}))


_TRACE = _Trace(Path(os.environ.get("NODE_LOSS_TRACE_OUT", "node-loss-trace.json")))


def pytest_configure(config: Any) -> None:
    sys.settrace(_TRACE)  # type: ignore[arg-type]
    threading.settrace(_TRACE)  # type: ignore[arg-type]


def pytest_runtest_setup(item: Any) -> None:
    """Start tracing when the node is killed; stop when the recovery's outcome is read."""
    from resurrect.demo.local_cluster import LocalSlurm

    kill = LocalSlurm.kill_node

    def kill_node(self: LocalSlurm, *args: Any, **kwargs: Any) -> Any:
        _TRACE.start()
        return kill(self, *args, **kwargs)

    LocalSlurm.kill_node = kill_node  # type: ignore[method-assign]
    outcome_of = item.module.outcome_of

    async def traced_outcome_of(*args: Any, **kwargs: Any) -> Any:
        try:
            return await outcome_of(*args, **kwargs)
        finally:
            _TRACE.stop()

    item.module.outcome_of = traced_outcome_of


# ---------------------------------------------------------------- the analysis
def path_functions(edges: list[list[Any]]) -> dict[str, list[str]]:
    """The path's functions by file: everything reachable from the roots."""
    calls: dict[str, set[str]] = collections.defaultdict(set)
    for caller, callee, _ in edges:
        calls[caller].add(callee)
    roots = list(ROOTS)
    roots += [f for c in calls if c.startswith(WORKFLOW_CALLERS) for f in calls[c]]
    roots += [f for c in calls if c.startswith(ACTIVITY_CALLER) for f in calls[c]]
    roots += [f for f in calls["EXT:?"] if f.startswith(TASK_ROOTS)]
    seen: set[str] = set()
    pending = roots
    while pending:
        function = pending.pop()
        if function in seen or function.startswith((*HARNESS, "<")):
            continue
        seen.add(function)
        pending.extend(calls[function])
    by_file: dict[str, list[str]] = collections.defaultdict(list)
    for function in seen:
        path, name = function.split("::", 1)
        if "<locals>.<" not in name:  # comprehensions and lambdas: their function is listed
            by_file[path].append(name)
    return {path: sorted(names) for path, names in sorted(by_file.items())}


def by_folder(paths: list[str]) -> dict[str, int]:
    """How many of ``paths`` each folder holds."""
    return dict(collections.Counter(path.rsplit("/", 1)[0] for path in paths).most_common())


def run_traced_test(out: Path) -> None:
    env = {
        **os.environ,
        "NODE_LOSS_TRACE_OUT": str(out),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent)]),
    }
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "node_loss_path", NODE_LOSS_TEST]
    subprocess.run(argv, cwd=ROOT, env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--show-functions", action="store_true", help="list each function")
    parser.add_argument("--runs", type=int, default=1, help="runs of the test, paths united")
    parser.add_argument("--keep-traces", type=Path, help="keep each run's call edges here")
    parser.add_argument(
        "--from-traces", type=Path, nargs="+", help="analyse kept traces; run nothing"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    edges: list[list[Any]] = []
    if args.from_traces:
        for trace in args.from_traces:
            edges.extend(json.loads(trace.read_text())["edges"])
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(0 if args.from_traces else args.runs):
            out = (args.keep_traces or Path(tmp)) / f"trace-{run}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            run_traced_test(out)
            edges.extend(json.loads(out.read_text())["edges"])
    functions = path_functions(edges)
    counted = [path for path in functions if not path.startswith(DATA_FILES)]
    result: dict[str, Any] = {
        "benchmark": "node_loss_path",
        "runs": args.runs,
        "files": len(counted),
        "data_files": len(functions) - len(counted),
        "by_folder": by_folder(counted),
        "counted": counted,
        "seconds": round(time.monotonic() - started, 1),
    }
    if args.show_functions:
        result["functions"] = functions
    print_result(result, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
