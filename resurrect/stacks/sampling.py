"""Who waits for whom: cheap, pause-free samples of each rank's main thread from ``/proc``.

In a synchronous job the ranks that are ahead wait, blocked on a futex, for the rank that is
behind (a gloo or NCCL work object, DDP's reducer, a barrier): a straggler is the rank its
peers wait for. Each sample reads ``/proc/PID/stat`` (state), ``/proc/PID/wchan`` (the kernel
function it sleeps in) and, where the kernel hides that, ``/proc/PID/syscall``. No ptrace,
no pause: it can run every fraction of a second.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from resurrect.stacks.processes import process_state

# The futex(2) syscall number per architecture (the wait behind every condition variable).
FUTEX_SYSCALL = {"x86_64": "202", "aarch64": "98", "ppc64le": "221"}


@dataclass(frozen=True, slots=True)
class RankWait:
    rank: int
    node: str | None
    state: str
    waiting: bool  # blocked on a futex: waiting for another thread or rank


def _read(path: Path, limit: int = 256) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("ascii", "replace").strip()
    except OSError:
        return ""


def is_waiting(pid: int, proc: Path = Path("/proc")) -> tuple[str, bool]:
    """(state, blocked on a futex) of one process's main thread."""
    state = process_state(pid, proc)
    if state != "S":
        return state, False
    wchan = _read(proc / str(pid) / "wchan")
    if wchan and wchan != "0":
        return state, "futex" in wchan
    syscall = _read(proc / str(pid) / "syscall").split(" ", 1)[0]
    return state, syscall == FUTEX_SYSCALL.get(platform.machine(), "")


def sample_waits(pids: dict[int, tuple[int, str | None]]) -> list[RankWait]:
    """One sample per rank: ``pids`` maps pid -> (rank, node)."""
    out = []
    for pid, (rank, node) in pids.items():
        if not os.path.exists(f"/proc/{pid}"):
            continue
        state, waiting = is_waiting(pid)
        out.append(RankWait(rank, node, state, waiting))
    return out
