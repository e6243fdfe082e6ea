"""Which Slurm job a process belongs to, as the kernel and Slurm say: never its environment.

A process is in step S of job N when either

* its cgroup path holds ``/job_N/step_S`` (proctrack/cgroup; cgroup v1
  ``/slurm/uid_U/job_N/step_S/task_T``, v2 ``/system.slice/slurmstepd.scope/job_N/step_S/...``)
  and the ``job_N`` directory of that hierarchy is owned by root (slurmstepd made it; a user
  may make a directory of that name in a cgroup subtree delegated to them, owned by them); the
  first such pair in the path counts, so nesting one inside a real job's subtree changes
  nothing; or
* it descends from a ``slurmstepd`` running as root whose process title is
  ``slurmstepd: [N.S]`` (proctrack/linuxproc, as on the local cluster). Only root can run a
  process as root or rewrite a root process's command line; the step daemon sets that title.

When both say something they must agree. The Slurm node a step daemon serves is the name of
the unix socket it listens on, ``<SlurmdSpoolDir>/<node>_<N>.<S>`` (a root-owned directory):
several Slurm nodes on one machine (the local cluster) are told apart by it, and several
clusters on one machine (test machines) by the ``SLURM_CONF`` its slurmd gave it (in the
root-owned daemon's environment; None on a cluster that uses the default path). The owner check
(the process's real uid is the job's owner, from Slurm) is the caller's
(:mod:`resurrect.stacks.processes`). Everything is read bounded; a process that vanishes or
cannot be read belongs to no job.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from resurrect.numbers import is_ascii_digits

MAX_ANCESTRY = 64
MAX_CGROUP_BYTES = 64 << 10
MAX_UNIX_TABLE_BYTES = 16 << 20
MAX_STEPD_FDS = 512
STEPD_COMM = "slurmstepd"
_TITLE = re.compile(
    rb"^slurmstepd: \[(?P<job>[0-9]{1,12})(?:\+[0-9]{1,6})?\.(?P<step>[A-Za-z0-9_]{1,32})\]"
)
_CGROUP_STEP = re.compile(r"/job_(?P<job>[0-9]{1,12})/step_(?P<step>[A-Za-z0-9_]{1,32})(?:/|$)")
_SOCKET_NAME = re.compile(r"^(?P<node>[A-Za-z0-9._-]{1,200})_(?P<job>[0-9]{1,12})\.[0-9]{1,10}$")


@dataclass(frozen=True, slots=True)
class ProcEntry:
    """What ``/proc/PID/stat`` says of one process."""

    pid: int
    ppid: int
    comm: str
    state: str


@dataclass(frozen=True, slots=True)
class StepDaemon:
    """A root-owned ``slurmstepd``: the job step it serves and, when its socket says, the node."""

    pid: int
    job_id: str
    step: str
    node: str | None
    slurm_conf: str | None = None


@dataclass(frozen=True, slots=True)
class Membership:
    """The job step the kernel puts a process in; ``node``: the Slurm node its step daemon
    serves (None: not known here, e.g. a cgroup member whose daemon is not its ancestor)."""

    job_id: str
    step: str
    node: str | None
    via: str  # "cgroup" or "slurmstepd"
    slurm_conf: str | None = None  # the step daemon's SLURM_CONF, when it has one


def read_stat(pid: int, proc: Path) -> ProcEntry | None:
    """``/proc/PID/stat``: parent, command name and state; None when gone."""
    try:
        raw = (proc / str(pid) / "stat").read_bytes()[:4096]
    except OSError:
        return None
    head, sep, tail = raw.rpartition(b")")
    fields = tail.split()
    if not sep or len(fields) < 2 or not fields[1].isdigit():  # bytes: only ASCII digits
        return None
    comm = head.partition(b"(")[2].decode("utf-8", "replace")
    return ProcEntry(pid, int(fields[1]), comm, fields[0].decode("ascii", "replace"))


def _real_id(pid: int, label: str, proc: Path) -> int | None:
    """The real id on the ``label`` line (``Uid:``, ``Gid:``) of ``/proc/PID/status``;
    None when gone or unreadable."""
    try:
        text = (proc / str(pid) / "status").read_bytes()[:8192].decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(label):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and is_ascii_digits(fields[1]) else None
    return None


def real_uid(pid: int, proc: Path) -> int | None:
    """The real uid (``Uid:`` of ``/proc/PID/status``); None when gone."""
    return _real_id(pid, "Uid:", proc)


def real_gid(pid: int, proc: Path) -> int | None:
    """The real gid (``Gid:`` of ``/proc/PID/status``); None when gone."""
    return _real_id(pid, "Gid:", proc)


def process_table(proc: Path) -> dict[int, ProcEntry]:
    """Every process's ``stat`` (one pass over ``/proc``)."""
    table: dict[int, ProcEntry] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return table
    for name in names:
        if is_ascii_digits(name):
            entry = read_stat(int(name), proc)
            if entry is not None:
                table[entry.pid] = entry
    return table


def _unix_sockets(proc: Path) -> dict[str, str]:
    """inode -> bound path, from ``/proc/net/unix``."""
    try:
        with open(proc / "net" / "unix", "rb") as handle:
            raw = handle.read(MAX_UNIX_TABLE_BYTES)
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in raw.decode("utf-8", "replace").splitlines()[1:]:
        fields = line.split(None, 7)
        if len(fields) == 8 and is_ascii_digits(fields[6]):
            out[fields[6]] = fields[7]
    return out


def _socket_node(pid: int, job_id: str, sockets: Mapping[str, str], proc: Path) -> str | None:
    """The node in the name of the step socket ``pid`` holds (``<node>_<job>.<step>``)."""
    try:
        fds = os.listdir(proc / str(pid) / "fd")[:MAX_STEPD_FDS]
    except OSError:
        return None
    for fd in fds:
        try:
            link = os.readlink(proc / str(pid) / "fd" / fd)
        except OSError:
            continue
        if not link.startswith("socket:["):
            continue
        path = sockets.get(link[8:-1], "")
        m = _SOCKET_NAME.match(path.rpartition("/")[2])
        if m is not None and m["job"] == job_id:
            return m["node"]
    return None


def _daemon_conf(pid: int, proc: Path) -> str | None:
    """``SLURM_CONF`` in a (root-owned) step daemon's environment, None when unset."""
    try:
        with open(proc / str(pid) / "environ", "rb") as handle:
            raw = handle.read(256 << 10)
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(b"SLURM_CONF="):
            return item[11:4107].decode("utf-8", "replace")
    return None


def step_daemons(table: Mapping[int, ProcEntry], proc: Path) -> dict[int, StepDaemon]:
    """The root-owned step daemons among ``table``, by pid, with the step their title names."""
    sockets: dict[str, str] | None = None
    found: dict[int, StepDaemon] = {}
    for pid, entry in table.items():
        if entry.comm != STEPD_COMM or real_uid(pid, proc) != 0:
            continue
        try:
            with open(proc / str(pid) / "cmdline", "rb") as handle:
                title = handle.read(256)
        except OSError:
            continue
        m = _TITLE.match(title)
        if m is None:
            continue
        if sockets is None:
            sockets = _unix_sockets(proc)
        job_id = m["job"].decode()
        node = _socket_node(pid, job_id, sockets, proc)
        conf = _daemon_conf(pid, proc)
        found[pid] = StepDaemon(pid, job_id, m["step"].decode(), node, conf)
    return found


def _owned_by_root(path: Path) -> bool:
    try:
        return path.stat().st_uid == 0
    except OSError:
        return False


def cgroup_step(pid: int, proc: Path, cgroup_root: Path) -> tuple[str, str] | None:
    """(job, step) from the process's cgroup path, when Slurm's ``job_N`` directory (root's)
    holds it; v2 (``0::/path``) under ``cgroup_root``, v1 under ``cgroup_root/<controllers>``."""
    try:
        with open(proc / str(pid) / "cgroup", "rb") as handle:
            text = handle.read(MAX_CGROUP_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        _, _, rest = line.partition(":")
        controllers, sep, path = rest.partition(":")
        m = _CGROUP_STEP.search(path) if sep else None
        if m is None:
            continue
        hierarchy = controllers.removeprefix("name=")
        mount = cgroup_root / hierarchy if hierarchy else cgroup_root
        job_dir = mount / path[: m.start() + len(f"/job_{m['job']}")].lstrip("/")
        if _owned_by_root(job_dir):
            return m["job"], m["step"]
    return None


def membership(
    pid: int,
    table: Mapping[int, ProcEntry],
    daemons: Mapping[int, StepDaemon],
    proc: Path,
    cgroup_root: Path,
) -> Membership | None:
    """The job step ``pid`` is in (see the module), None when neither the cgroup nor the
    ancestry says, or when they disagree."""
    cgroup = cgroup_step(pid, proc, cgroup_root)
    daemon: StepDaemon | None = None
    current = table.get(pid)
    for _ in range(MAX_ANCESTRY):
        if current is None or current.ppid <= 1:
            break
        daemon = daemons.get(current.ppid)
        if daemon is not None:
            break
        current = table.get(current.ppid)
    if daemon is not None:
        if cgroup is not None and cgroup[0] != daemon.job_id:
            return None
        return Membership(daemon.job_id, daemon.step, daemon.node, "slurmstepd", daemon.slurm_conf)
    if cgroup is not None:
        return Membership(cgroup[0], cgroup[1], None, "cgroup")
    return None
