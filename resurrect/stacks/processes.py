"""The rank processes of a Slurm job on this node, found through ``/proc`` (as root).

A rank is a process whose environment has the job's ``SLURM_JOB_ID`` and a ``RANK`` (set by
torchrun and most launchers for each worker; the launcher itself has none). Its node is the
environment's ``SLURMD_NODENAME`` (on the local test cluster every node is this machine, and
that variable tells them apart). Environments are read bounded; processes that vanish or
cannot be read are skipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MAX_ENVIRON_BYTES = 256 << 10
_KEYS = (
    b"SLURM_JOB_ID",
    b"RANK",
    b"WORLD_SIZE",
    b"SLURMD_NODENAME",
    b"SLURM_RESTART_COUNT",
    # the GPU binding (sensors/node_agent/gpu_binding.py)
    b"LOCAL_RANK",
    b"CUDA_VISIBLE_DEVICES",
    b"SLURM_STEP_GPUS",
    b"SLURM_JOB_GPUS",
    # where its Flight Recorder dump goes, and whether it keeps one (flight_recorder.py);
    # PyTorch >= 2.7 names them TORCH_FR_*, the TORCH_NCCL_* names still work
    b"TORCH_FR_DUMP_TEMP_FILE",
    b"TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    b"TORCH_FR_BUFFER_SIZE",
    b"TORCH_NCCL_TRACE_BUFFER_SIZE",
)


@dataclass(frozen=True, slots=True)
class RankProcess:
    pid: int
    rank: int | None
    node: str | None
    state: str
    world_size: int | None = None
    # The GPU binding Slurm and the launcher gave it: its device ordinal (LOCAL_RANK), the
    # devices it sees (CUDA_VISIBLE_DEVICES) and the node's GPU indices of its step
    # (SLURM_STEP_GPUS, else SLURM_JOB_GPUS); empty when unset.
    local_rank: int | None = None
    cuda_visible_devices: str = ""
    slurm_gpus: str = ""
    # TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE (None: unset) and
    # TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE ("": unset)
    flight_recorder_prefix: str | None = None
    flight_recorder_buffer: str = ""


def _environ(pid: int, proc: Path) -> dict[str, str]:
    try:
        with open(proc / str(pid) / "environ", "rb") as handle:
            raw = handle.read(MAX_ENVIRON_BYTES)
    except OSError:
        return {}
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in _KEYS:
            out[key.decode("ascii", "replace")] = value[:256].decode("utf-8", "replace")
    return out


def process_state(pid: int, proc: Path = Path("/proc")) -> str:
    """The state letter of ``/proc/PID/stat`` (after the parenthesised command), '?' if gone."""
    try:
        text = (proc / str(pid) / "stat").read_bytes()[:4096].decode("ascii", "replace")
    except OSError:
        return "?"
    tail = text.rpartition(")")[2].split()
    return tail[0] if tail else "?"


def process_uid(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The real uid of a process (``Uid:`` in ``/proc/PID/status``), None if gone."""
    try:
        text = (proc / str(pid) / "status").read_bytes()[:8192].decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


def process_started_at(pid: int, proc: Path = Path("/proc")) -> float | None:
    """When a process started (epoch seconds): the boot time (``btime`` in ``/proc/stat``)
    plus its start in clock ticks (``/proc/PID/stat`` field 22); None if unknown."""
    try:
        text = (proc / str(pid) / "stat").read_bytes()[:4096].decode("ascii", "replace")
        system = (proc / "stat").read_bytes()[: 1 << 20].decode("ascii", "replace")
    except OSError:
        return None
    tail = text.rpartition(")")[2].split()  # from field 3 (the state) on
    boot = next((line.split()[1:2] for line in system.splitlines() if line.startswith("btime")), [])
    if len(tail) < 20 or not tail[19].isdigit() or not boot or not boot[0].isdigit():
        return None
    return int(boot[0]) + int(tail[19]) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class JobRank:
    """A rank process with the job attempt it belongs to."""

    job_id: str
    restart_count: str
    process: RankProcess


def scan_rank_processes(proc: Path = Path("/proc")) -> list[JobRank]:
    """Every rank process of every Slurm job visible on this node (one pass over /proc)."""
    found: list[JobRank] = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        pid = int(name)
        env = _environ(pid, proc)
        if "SLURM_JOB_ID" not in env or "RANK" not in env:
            continue
        rank_text, world_text = env["RANK"], env.get("WORLD_SIZE", "")
        rank = int(rank_text) if rank_text.isdigit() else None
        world = int(world_text) if world_text.isdigit() else None
        node = env.get("SLURMD_NODENAME")
        local = env.get("LOCAL_RANK", "")
        process = RankProcess(
            pid,
            rank,
            node,
            process_state(pid, proc),
            world,
            local_rank=int(local) if local.isdigit() else None,
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES", ""),
            slurm_gpus=env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS", ""),
            flight_recorder_prefix=env.get("TORCH_FR_DUMP_TEMP_FILE")
            or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
            flight_recorder_buffer=env.get("TORCH_FR_BUFFER_SIZE")
            or env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", ""),
        )
        found.append(JobRank(env["SLURM_JOB_ID"], env.get("SLURM_RESTART_COUNT", "0"), process))
    return found


def ranks_of(
    scan: list[JobRank], job_id: str, restart_count: int | None = None
) -> list[RankProcess]:
    """The rank processes of one job (attempt) in a scan, in rank order."""
    found = [
        r.process
        for r in scan
        if r.job_id == job_id and (restart_count is None or r.restart_count == str(restart_count))
    ]
    return sorted(found, key=lambda p: (p.rank is None, p.rank or 0, p.pid))


def job_rank_processes(
    job_id: str, *, restart_count: int | None = None, proc: Path = Path("/proc")
) -> list[RankProcess]:
    """Every rank process of ``job_id`` (of that attempt, when given) visible on this node."""
    return ranks_of(scan_rank_processes(proc), job_id, restart_count)
