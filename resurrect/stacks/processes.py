"""The rank processes of a Slurm job on this node, found through ``/proc`` (as root).

Which job a process belongs to is the kernel's word (:mod:`.job_membership`: its cgroup, or
its descent from the root-owned ``slurmstepd`` of the job's step), and its real uid must be
the job's owner (from Slurm). Its environment never decides identity: variables are read
only from processes already shown to be the job's, as labels the job gives itself (its rank
number, world size, attempt, Flight Recorder path, GPU ordinal). A forged label can only
mislabel the job's own ranks.

Which of the job's processes are its ranks, whatever launched them (torchrun, ``srun
python``, mpirun, PMIx, DeepSpeed, Accelerate), is :mod:`.launchers`' part.

The node of a rank is the node the probe runs on (the caller's); where several Slurm nodes
share a machine (the local cluster), the node its step daemon serves. Environments are read
bounded; processes that vanish or cannot be read are skipped.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace
from pathlib import Path

from resurrect.numbers import is_ascii_digits
from resurrect.stacks.job_membership import (
    ProcEntry,
    membership,
    process_table,
    real_gid,
    real_uid,
    step_daemons,
)
from resurrect.stacks.launchers import RANK_LABELS, Member, ranks_among

MAX_ENVIRON_BYTES = 256 << 10
CGROUP_ROOT = Path("/sys/fs/cgroup")
_LOCAL_RANK_KEYS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
_KEYS = frozenset(
    {
        *(label for label, _ in RANK_LABELS),
        *(w for _, worlds in RANK_LABELS for w in worlds),
        *_LOCAL_RANK_KEYS,
        "SLURM_RESTART_COUNT",
        # the GPU ordinal the launcher gave it (sensors/node_agent/gpu_binding.py)
        "CUDA_VISIBLE_DEVICES",
        "SLURM_STEP_GPUS",
        "SLURM_JOB_GPUS",
        # where its Flight Recorder dump goes, and whether it keeps one (flight_recorder.py);
        # PyTorch >= 2.7 names them TORCH_FR_*, the TORCH_NCCL_* names still work
        "TORCH_FR_DUMP_TEMP_FILE",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
        "TORCH_FR_BUFFER_SIZE",
        "TORCH_NCCL_TRACE_BUFFER_SIZE",
    }
)


@dataclass(frozen=True, slots=True)
class RankProcess:
    pid: int
    rank: int | None
    node: str | None
    state: str
    world_size: int | None = None
    # Labels from its environment (the job's word, read only once the kernel showed the
    # process is the job's): its device ordinal (LOCAL_RANK), the devices it sees
    # (CUDA_VISIBLE_DEVICES) and its step's GPU indices (SLURM_STEP_GPUS, else
    # SLURM_JOB_GPUS); empty when unset. Which GPUs the job holds is Slurm's (GRES).
    local_rank: int | None = None
    cuda_visible_devices: str = ""
    slurm_gpus: str = ""
    # TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE (None: unset) and
    # TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE ("": unset)
    flight_recorder_prefix: str | None = None
    flight_recorder_buffer: str = ""
    # the variable its rank number came from (RANK_LABELS), "" when none
    rank_label: str = ""


def _environ(pid: int, proc: Path) -> dict[str, str]:
    try:
        with open(proc / str(pid) / "environ", "rb") as handle:
            raw = handle.read(MAX_ENVIRON_BYTES)
    except OSError:
        return {}
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        name = key[:64].decode("ascii", "replace")
        if sep and name in _KEYS:
            out[name] = value[:256].decode("utf-8", "replace")
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
    return real_uid(pid, proc)


def process_gid(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The real gid of a process (``Gid:`` in ``/proc/PID/status``), None if gone."""
    return real_gid(pid, proc)


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
    if len(tail) < 20 or not is_ascii_digits(tail[19]) or not boot or not is_ascii_digits(boot[0]):
        return None
    return int(boot[0]) + int(tail[19]) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class JobRank:
    """A rank process with the job attempt the kernel puts it in, and its real uid."""

    job_id: str
    restart_count: str
    process: RankProcess
    uid: int | None = None
    # the node its step daemon serves, when it says (several Slurm nodes on one machine)
    step_node: str | None = None
    # its step daemon's SLURM_CONF, when it has one (several clusters on one machine)
    slurm_conf: str | None = None


def _number(text: str) -> int | None:
    return int(text) if is_ascii_digits(text) and len(text) <= 9 else None


def _rank_process(member: Member, proc: Path) -> RankProcess:
    env = member.env
    name, value = member.label or ("", "")
    worlds = dict(RANK_LABELS).get(name, ())
    world = next((env[w] for w in worlds if w in env), "")
    local = next((env[k] for k in _LOCAL_RANK_KEYS if k in env), "")
    return RankProcess(
        member.pid,
        _number(value),
        member.where.node,
        process_state(member.pid, proc),
        _number(world),
        local_rank=_number(local),
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES", ""),
        slurm_gpus=env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS", ""),
        flight_recorder_prefix=env.get("TORCH_FR_DUMP_TEMP_FILE")
        or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
        flight_recorder_buffer=env.get("TORCH_FR_BUFFER_SIZE")
        or env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", ""),
        rank_label=name,
    )


_Groups = dict[tuple[str, str | None, str], list[Member]]


def _job_members(proc: Path, cgroup_root: Path) -> tuple[dict[int, ProcEntry], _Groups]:
    """The process table and every process of every Slurm job on this machine (step daemons
    left out), grouped by (job, cluster, attempt label), by the kernel's word on the job."""
    table = process_table(proc)
    daemons = step_daemons(table, proc)
    groups: _Groups = {}
    for pid in table:
        if pid in daemons:
            continue
        where = membership(pid, table, daemons, proc, cgroup_root)
        if where is None:
            continue
        env = _environ(pid, proc)
        attempt = env.get("SLURM_RESTART_COUNT", "0")
        key = (where.job_id, where.slurm_conf, attempt)
        groups.setdefault(key, []).append(Member(pid, where, env))
    return table, groups


def _job_rank(job_id: str, attempt: str, member: Member, proc: Path) -> JobRank:
    return JobRank(
        job_id,
        attempt,
        _rank_process(member, proc),
        uid=real_uid(member.pid, proc),
        step_node=member.where.node,
        slurm_conf=member.where.slurm_conf,
    )


def scan_rank_processes(
    proc: Path = Path("/proc"), cgroup_root: Path = CGROUP_ROOT
) -> list[JobRank]:
    """Every rank process of every Slurm job on this machine, by the kernel's word on which
    job it is in (one pass over /proc; environments read only of the jobs' processes)."""
    table, groups = _job_members(proc, cgroup_root)
    return [
        _job_rank(job_id, attempt, member, proc)
        for (job_id, _, attempt), members in groups.items()
        for member in ranks_among(members, table, proc)
    ]


def scan_job_processes(
    proc: Path = Path("/proc"), cgroup_root: Path = CGROUP_ROOT
) -> list[JobRank]:
    """Every process of every Slurm job on this machine, ranks or not (the batch script, srun,
    a launcher, a rank's children such as data loaders or a checkpoint writer), by the
    kernel's word on which job it is in; the step daemons themselves (root's) are not. A
    process that is no rank has ``rank`` None unless it inherited a rank's label."""
    _, groups = _job_members(proc, cgroup_root)
    return [
        _job_rank(job_id, attempt, member, proc)
        for (job_id, _, attempt), members in groups.items()
        for member in members
    ]


def this_node() -> str:
    """This machine's short host name (a Slurm node's name, where nothing else says)."""
    return socket.gethostname().split(".")[0]


def _same_node(a: str, b: str) -> bool:
    return a.split(".")[0].lower() == b.split(".")[0].lower()


def ranks_of(
    scan: list[JobRank],
    job_id: str,
    restart_count: int | None = None,
    *,
    owner_uid: int | None,
    node: str | None = None,
    slurm_conf: str | None = None,
) -> list[RankProcess]:
    """The rank processes of one job (attempt) in a scan, in rank order: those whose real uid
    is ``owner_uid`` (the job's owner, from Slurm; None: unknown, so none), on ``node`` (the
    node the probe runs on: ranks whose step daemon serves another node are left out; None:
    each keeps its step daemon's node, else this machine's name), of the cluster whose
    ``slurm_conf`` it is (None: any): step daemons started with another SLURM_CONF are
    another cluster's, and so are those started without one when some name it."""
    if owner_uid is None:
        return []
    # step daemons that name the wanted configuration are the cluster's; where none does
    # (a cluster whose slurmd runs without SLURM_CONF), those that name none
    confs = {r.slurm_conf for r in scan if r.job_id == job_id}
    conf_of_cluster = slurm_conf if slurm_conf in confs else None
    found: list[RankProcess] = []
    for r in scan:
        if r.job_id != job_id or r.uid != owner_uid:
            continue
        if restart_count is not None and r.restart_count != str(restart_count):
            continue
        if node is not None and r.step_node is not None and not _same_node(r.step_node, node):
            continue
        if slurm_conf is not None and r.slurm_conf != conf_of_cluster:
            continue
        found.append(replace(r.process, node=node or r.step_node or this_node()))
    return sorted(found, key=lambda p: (p.rank is None, p.rank or 0, p.pid))


def job_rank_processes(
    job_id: str,
    *,
    owner_uid: int | None,
    restart_count: int | None = None,
    node: str | None = None,
    slurm_conf: str | None = None,
    proc: Path = Path("/proc"),
    cgroup_root: Path = CGROUP_ROOT,
) -> list[RankProcess]:
    """Every rank process of ``job_id`` (of that attempt, when given) on this machine, owned
    by ``owner_uid``; see :func:`ranks_of` for ``node`` and ``slurm_conf``."""
    scan = scan_rank_processes(proc, cgroup_root)
    return ranks_of(
        scan, job_id, restart_count, owner_uid=owner_uid, node=node, slurm_conf=slurm_conf
    )
