"""Which GPU of this node each rank of a job drives, from Slurm's GPU binding.

Which GPUs a job holds on a node is Slurm's word: ``scontrol show job -d``, per node,
``GRES=gpu:4(IDX:0-3)`` (:func:`job_gres_indices`). Only a GPU among those is ever read for
the job (:func:`resurrect.sensors.node_agent.gpu_activity.rank_gpu_activity`).

Which of them one rank drives is the job's own word, from its environment (a label, like
its rank number):

* ``SLURM_STEP_GPUS`` (else ``SLURM_JOB_GPUS``): the node's GPU indices of the step;
* ``CUDA_VISIBLE_DEVICES``: what the process may use, in CUDA's ordinal order. With
  ``ConstrainDevices=yes`` the cgroup renumbers it (``0,1,...``: the i-th entry is the i-th
  step GPU); without, it repeats the indices; it may also list UUIDs (``GPU-...``).

A rank drives the device of its ordinal among its visible devices: ``LOCAL_RANK`` (torchrun
and most launchers set one device per local rank), 0 when it sees one device. Slurm's IDX
is taken as the NVML index: true with ``AutoDetect=nvml`` (both order by PCI bus id) and with
a gres.conf listing ``/dev/nvidia[0-N]`` in bus order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from resurrect.numbers import is_ascii_digits
from resurrect.scheduler.hostlist import expand_hostlist
from resurrect.stacks.processes import RankProcess

_INDEX_LIST = re.compile(r"^[0-9]{1,4}(?:-[0-9]{1,4})?(?:,[0-9]{1,4}(?:-[0-9]{1,4})?)*$")
# One node line of `scontrol show job -d`:
#   Nodes=gpu[1-2] CPU_IDs=0-7 Mem=0 GRES=gpu:h100:4(IDX:0-3)
_NODE_GRES = re.compile(r"\bNodes=(?P<nodes>\S{1,4096})\s.{0,2000}?\bGRES=(?P<gres>\S{0,4096})")
_GPU_IDX = re.compile(r"\bgpu(?::[^:(,\s]{1,64})?(?::[0-9]{1,4})?\(IDX:(?P<idx>[0-9,\-]{1,512})\)")
MAX_GPUS = 4096
# the lines of `scontrol show job -d` that frame the per-node detail lines
_NODE_LIST_LINE = "   NodeList="
_AFTER_DETAIL_LINE = "   MinCPUsNode="
_DETAIL_LINE = re.compile(
    r"^     Nodes=\S{1,4096} CPU_IDs=\S{0,4096} Mem=\S{1,64} GRES=\S{0,4096}$"
)


@dataclass(frozen=True, slots=True)
class GpuRef:
    """A GPU of this node, by NVML index or by UUID (as CUDA_VISIBLE_DEVICES named it)."""

    index: int | None = None
    uuid: str | None = None


def parse_indices(text: str) -> list[int]:
    """``0-2,5`` -> [0, 1, 2, 5]; anything else -> []."""
    text = text.strip()
    if not text or not _INDEX_LIST.match(text):
        return []
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first or last - first > MAX_GPUS:
            return []
        out.extend(range(first, last + 1))
    return out[:MAX_GPUS]


def gres_indices(show_job_detail: str) -> dict[str, list[int]]:
    """Per node, the GPU indices a job holds there, from ``scontrol show job -d`` text
    (22.05 ``GRES=gpu(IDX:0-3)``, 23+ ``GRES=gpu:h100:4(IDX:0-3)``)."""
    out: dict[str, list[int]] = {}
    for line in show_job_detail.splitlines():
        m = _NODE_GRES.search(line)
        if m is None:
            continue
        gpus = [i for g in _GPU_IDX.finditer(m["gres"]) for i in parse_indices(g["idx"])]
        if not gpus:
            continue
        for node in expand_hostlist(m["nodes"]):
            out.setdefault(node, []).extend(gpus)
    return out


def job_gres_indices(show_job_detail: str) -> dict[str, list[int]] | None:
    """:func:`gres_indices` of the per-node detail lines of ``scontrol show job -d`` only:
    the lines between Slurm's ``NodeList=`` and ``MinCPUsNode=`` lines, each of the detail
    shape. Job text (name, comment, paths) printed around them cannot add a node's GPUs: a
    second ``NodeList=`` or ``MinCPUsNode=`` line, or any other line between them, makes
    the answer None (not known)."""
    lines = show_job_detail.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(_NODE_LIST_LINE)]
    ends = [i for i, line in enumerate(lines) if line.startswith(_AFTER_DETAIL_LINE)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        return None
    window = [line for line in lines[starts[0] + 1 : ends[0]] if line.startswith("     ")]
    if not all(_DETAIL_LINE.match(line) for line in window):
        return None
    return gres_indices("\n".join(window))


def _visible(process: RankProcess) -> list[str]:
    return [t.strip() for t in process.cuda_visible_devices.split(",") if t.strip()]


def bound_gpu(
    process: RankProcess, job_gpus: Mapping[str, Sequence[int]] | None = None
) -> GpuRef | None:
    """The GPU ``process`` drives, or None when its binding does not say.

    ``job_gpus``: :func:`gres_indices` of the job, used when the process's environment does
    not carry its step's GPUs."""
    visible = _visible(process)
    step = parse_indices(process.slurm_gpus)
    if not step and job_gpus is not None and process.node is not None:
        step = list(job_gpus.get(process.node, []))
    count = len(visible) or len(step)
    if count == 0:
        return None
    ordinal = 0 if count == 1 else process.local_rank
    if ordinal is None or ordinal >= count:
        return None
    if visible:
        token = visible[ordinal]
        if not is_ascii_digits(token):  # a UUID (GPU-..., MIG-...): the device itself
            return GpuRef(uuid=token)
        if len(step) == len(visible):  # renumbered by the cgroup, or the same numbers
            return GpuRef(index=step[ordinal])
        return _subset_index(int(token), step)
    return GpuRef(index=step[ordinal])


def _subset_index(token: int, step: Sequence[int]) -> GpuRef | None:
    """A task that sees fewer devices than its step: ``token`` is the node's index (no
    device cgroup) or a position among the step's GPUs (renumbered); None when it could be
    either and they differ."""
    if not step:
        return GpuRef(index=token)
    as_index = token in step
    as_position = token < len(step)
    if as_index and as_position and step[token] != token:
        return None
    if as_position and not as_index:
        return GpuRef(index=step[token])
    return GpuRef(index=token)
