"""All the stacks of one job's ranks on this node, read in parallel within a time bound.

This runs where the ranks run. On the local test cluster every node is this machine, so the
sensor that suspects a hang calls it directly (as root). On a real cluster it is what the node
agent runs on each of the job's nodes (``resurrect stacks dump --job ID --json`` is the same
call from the command line) and the per-node results are joined before judging.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from resurrect.errors import StackDumpError
from resurrect.stacks.classify import RankStack
from resurrect.stacks.processes import job_rank_processes, process_state
from resurrect.stacks.pyspy import dump_stack
from resurrect.stacks.pyspy_text import parse_pyspy_dump

MAX_PARALLEL = 8


def _one(pid: int, rank: int | None, node: str | None, timeout_s: float) -> RankStack:
    state = process_state(pid)
    try:
        text = dump_stack(pid, stopped=state in ("T", "t"), timeout_s=timeout_s)
    except StackDumpError as exc:
        return RankStack(rank, node, pid, state, None, error=str(exc))
    # the state again: a process stopped while we read it is stopped
    after = process_state(pid)
    return RankStack(rank, node, pid, after if after in ("T", "t", "D") else state,
                     parse_pyspy_dump(text), text)  # fmt: skip


def collect_job_stacks(
    job_id: str, *, restart_count: int | None = None, timeout_s: float = 15.0
) -> list[RankStack]:
    """The stacks of every rank of the job visible here; each dump bounded by ``timeout_s``."""
    processes = job_rank_processes(job_id, restart_count=restart_count)
    if not processes:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(processes))) as pool:
        futures = [pool.submit(_one, p.pid, p.rank, p.node, timeout_s) for p in processes]
        results = [f.result(timeout=timeout_s * 3 + 5) for f in futures]
    return results
