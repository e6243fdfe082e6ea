"""The ranks of one job on this node: their stacks (py-spy, in parallel, bounded) and cheap
samples of who waits (``/proc``).

This runs where the ranks run. On the local test cluster every node is this machine, so the
sensor that follows the job uses :class:`LocalRanks` directly (as root). On a real cluster it
is what the node agent runs on each of the job's nodes, and the per-node results are joined
before judging (the sensor then gets a :class:`RankAccess` that asks the agents).

Which processes are the job's ranks is the kernel's and Slurm's word
(:mod:`resurrect.stacks.processes`): the job's steps, its owner's uid.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from resurrect.contracts import Evidence
from resurrect.errors import StackDumpError
from resurrect.sensors.node_agent.gpu_activity import (
    LOCAL_GPUS,
    GpuActivity,
    RankGpu,
    rank_gpu_activity,
)
from resurrect.stacks.classify import RankStack
from resurrect.stacks.flight_recorder import rank_flight_record
from resurrect.stacks.nccl_ras import query_ras
from resurrect.stacks.processes import (
    JobRank,
    RankProcess,
    job_rank_processes,
    process_state,
    ranks_of,
    scan_rank_processes,
)
from resurrect.stacks.pyspy import dump_stack
from resurrect.stacks.pyspy_text import parse_pyspy_dump
from resurrect.stacks.sampling import RankWait, sample_waits
from resurrect.stacks.slurm_job import job_gpus, job_owner_uid

MAX_PARALLEL = 8
REDISCOVER_S = 10.0


class RankAccess(Protocol):
    def stacks(self) -> list[RankStack]: ...

    def waits(self) -> list[RankWait]: ...

    def gpus(self) -> list[RankGpu]: ...

    def evidence(self) -> list[Evidence]:
        """What the last ``stacks()`` found besides stacks (NCCL RAS findings, or why not)."""
        ...


def _one(process: RankProcess, timeout_s: float) -> RankStack:
    pid, rank, node, world = process.pid, process.rank, process.node, process.world_size
    state = process_state(pid)
    flight = rank_flight_record(process)
    try:
        text = dump_stack(pid, stopped=state in ("T", "t"), timeout_s=timeout_s)
    except StackDumpError as exc:
        return RankStack(rank, node, pid, state, None, error=str(exc), world_size=world,
                         collectives=flight.collectives,
                         flight_recorder_note=flight.note)  # fmt: skip
    # the state again: a process stopped while we read it is stopped
    after = process_state(pid)
    return RankStack(rank, node, pid, after if after in ("T", "t", "D") else state,
                     parse_pyspy_dump(text), text, world_size=world,
                     collectives=flight.collectives,
                     flight_recorder_note=flight.note)  # fmt: skip


def collect_job_stacks(
    job_id: str,
    *,
    owner_uid: int | None = None,
    restart_count: int | None = None,
    timeout_s: float = 15.0,
    node: str | None = None,
    slurm_conf: str | None = None,
) -> list[RankStack]:
    """The stacks of every rank of the job here; each dump bounded by ``timeout_s``.

    ``owner_uid``: the job owner's uid from Slurm (None: asked of Slurm here). ``node``: the
    node this runs as (the agent's own): only ranks of step daemons serving it (several
    Slurm nodes on one machine, as on the local cluster), each named after it.
    ``slurm_conf``: the cluster's (several clusters on one machine; None: any)."""
    owner = owner_uid if owner_uid is not None else job_owner_uid(job_id)
    processes = job_rank_processes(
        job_id, owner_uid=owner, restart_count=restart_count, node=node, slurm_conf=slurm_conf
    )
    if not processes:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(processes))) as pool:
        futures = [pool.submit(_one, p, timeout_s) for p in processes]
        return [f.result(timeout=timeout_s * 3 + 5) for f in futures]


def job_gpu_activity(
    job_id: str, processes: list[RankProcess], gpus: list[GpuActivity]
) -> list[RankGpu]:
    """The GPU activity of the job's ranks here, each node's ranks on the GPUs Slurm gave
    the job there (GRES; not known: the pairing is the job's word, see gpu_activity)."""
    held = job_gpus(job_id) or {}
    by_node: dict[str | None, list[RankProcess]] = {}
    for process in processes:
        by_node.setdefault(process.node, []).append(process)
    found: list[RankGpu] = []
    for node, ranks in by_node.items():
        here = held.get(node) if node is not None else None
        found.extend(rank_gpu_activity(ranks, gpus, here))
    return found


class _SharedScan:
    """One scan of ``/proc`` environments shared by every followed job, at most every
    ``REDISCOVER_S`` seconds (reading every process's environment is the costly part)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scan: list[JobRank] = []
        self._at = float("-inf")

    def get(self) -> list[JobRank]:
        with self._lock:
            now = time.monotonic()
            if now - self._at >= REDISCOVER_S:
                self._scan, self._at = scan_rank_processes(), now
            return self._scan


_SHARED_SCAN = _SharedScan()


class LocalRanks:
    """A job attempt's ranks on this machine: stacks (a fresh look) and wait samples (over
    the shared, periodically refreshed process scan)."""

    def __init__(
        self,
        job_id: str,
        restart_count: int | None = None,
        *,
        owner_uid: int | None,
        slurm_conf: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.restart_count = restart_count
        self.owner_uid = owner_uid
        self.slurm_conf = slurm_conf
        self._evidence: list[Evidence] = []

    def stacks(self) -> list[RankStack]:
        stacks = collect_job_stacks(
            self.job_id,
            owner_uid=self.owner_uid,
            restart_count=self.restart_count,
            slurm_conf=self.slurm_conf,
        )
        nodes = sorted({s.node for s in stacks if s.node})
        ras = query_ras(pids=[s.pid for s in stacks]) if stacks else None
        self._evidence = ras.evidence(", ".join(nodes) or None) if ras is not None else []
        return stacks

    def evidence(self) -> list[Evidence]:
        return list(self._evidence)

    def _processes(self) -> list[RankProcess]:
        scan = _SHARED_SCAN.get()
        return ranks_of(
            scan,
            self.job_id,
            self.restart_count,
            owner_uid=self.owner_uid,
            slurm_conf=self.slurm_conf,
        )

    def waits(self) -> list[RankWait]:
        processes = self._processes()
        return sample_waits({p.pid: (p.rank, p.node) for p in processes if p.rank is not None})

    def gpus(self) -> list[RankGpu]:
        """Each rank's GPU activity (NVML of this machine, Slurm's GPU binding)."""
        gpus = LOCAL_GPUS.read()
        return job_gpu_activity(self.job_id, self._processes(), gpus) if gpus else []
