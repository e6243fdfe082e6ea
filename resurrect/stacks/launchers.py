"""Which of a job's processes are its ranks, whatever launched them.

Given the processes the kernel puts in one job's steps (:mod:`.job_membership`), their
environments are the job's own labels. The launcher shapes:

* torchrun, DeepSpeed, Accelerate: the workers carry ``RANK`` (the launcher itself none);
* mpirun / Open MPI: ``OMPI_COMM_WORLD_RANK``; PMIx (``srun --mpi=pmix``): ``PMIX_RANK``;
  PMI-2 / MPICH: ``PMI_RANK``;
* ``srun python train.py``: one task per rank, ``SLURM_PROCID`` (in a numbered step only:
  the batch script has ``SLURM_PROCID=0`` too).

The first of these variables (in that order) that any of the job's processes carries names
the ranks: processes that carry only a later one are launchers (torchrun's agent has
``SLURM_PROCID``). A process whose command line is a launcher's (torchrun, DeepSpeed's and
Accelerate's launchers, mpirun, orted, ...) is never a rank, even before its workers exist.
A process that inherited its rank's label (a data-loader worker, a shell that did not
``exec``) is not a second rank: of the processes with one label in one line of descent, a
Python one is the rank, else the topmost.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from resurrect.numbers import is_ascii_digits
from resurrect.stacks.job_membership import MAX_ANCESTRY, Membership, ProcEntry

# (rank variable, world size variables), in the order that decides which names the ranks
RANK_LABELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("RANK", ("WORLD_SIZE",)),
    ("OMPI_COMM_WORLD_RANK", ("OMPI_COMM_WORLD_SIZE",)),
    ("PMIX_RANK", ("OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")),
    ("PMI_RANK", ("PMI_SIZE",)),
    ("SLURM_PROCID", ("SLURM_NTASKS", "SLURM_NPROCS")),
)
_STEP_ONLY_LABELS = frozenset({"SLURM_PROCID"})  # meaningless in the batch/extern step
# command names (argv[0], or a Python -m module / script) of launchers, never ranks
LAUNCHERS = frozenset(
    {
        "torchrun",
        "torch.distributed.run",
        "torch.distributed.launch",
        "deepspeed",
        "deepspeed.launcher.launch",
        "deepspeed.launcher.runner",
        "accelerate",
        "accelerate.commands.launch",
        "mpirun",
        "mpiexec",
        "orterun",
        "orted",
        "prted",
        "prterun",
        "hydra_pmi_proxy",
        "srun",
    }
)


@dataclass(frozen=True, slots=True)
class Member:
    """A process of one job (the kernel's word), its environment's labels, and the rank
    label it carries once chosen."""

    pid: int
    where: Membership
    env: dict[str, str]
    label: tuple[str, str] | None = None  # (variable, value)


def _label(member: Member, allowed: Sequence[str]) -> tuple[str, str] | None:
    for name in allowed:
        if name in _STEP_ONLY_LABELS and not is_ascii_digits(member.where.step):
            continue
        value = member.env.get(name)
        if value is not None:
            return name, value
    return None


def _is_python(pid: int, proc: Path) -> bool:
    try:
        name = os.readlink(proc / str(pid) / "exe").rpartition("/")[2]
    except OSError:
        return False
    return name.startswith(("python", "pypy"))


def _is_launcher(pid: int, proc: Path) -> bool:
    """Whether the process runs a launcher (its first few arguments name one)."""
    try:
        with open(proc / str(pid) / "cmdline", "rb") as handle:
            raw = handle.read(4096)
    except OSError:
        return False
    words = [w.decode("utf-8", "replace") for w in raw.split(b"\0")[:4] if w]
    names = {w.rpartition("/")[2].removesuffix(".py") for w in words}
    return not names.isdisjoint(LAUNCHERS)


def _ancestors(pid: int, table: Mapping[int, ProcEntry]) -> list[int]:
    out: list[int] = []
    current = table.get(pid)
    while current is not None and current.ppid > 1 and len(out) < MAX_ANCESTRY:
        out.append(current.ppid)
        current = table.get(current.ppid)
    return out


def ranks_among(members: list[Member], table: Mapping[int, ProcEntry], proc: Path) -> list[Member]:
    """The job's ranks among its processes (the launcher shapes of the module docstring)."""
    members = [m for m in members if not _is_launcher(m.pid, proc)]
    chosen = next(
        (n for n, _ in RANK_LABELS if any(_label(m, [n]) is not None for m in members)), None
    )
    if chosen is None:
        return []
    labelled = [replace(m, label=_label(m, [chosen])) for m in members]
    labelled = [m for m in labelled if m.label is not None]
    by_pid = {m.pid: m for m in labelled}
    python = {m.pid: _is_python(m.pid, proc) for m in labelled}
    dropped: set[int] = set()
    for m in labelled:
        for up in _ancestors(m.pid, table):
            other = by_pid.get(up)
            if other is None or other.label != m.label:
                continue
            if python[up] or not python[m.pid]:
                dropped.add(m.pid)  # a helper under its rank (or a shell under a shell)
            else:
                dropped.add(up)  # a shell that did not exec its Python rank
    return [m for m in labelled if m.pid not in dropped]
