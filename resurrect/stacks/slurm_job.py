"""What Slurm says about one job, asked from the node side (the agent, ``stacks dump``).

The owner's uid (``squeue -h -o %U``: a number, no job text) and the GPUs the job holds per
node (``scontrol show job -d``: the ``GRES=...(IDX:...)`` lines, parsed by
:func:`resurrect.sensors.node_agent.gpu_binding.job_gres_indices`). argv lists, bounded in time;
answers are kept a while per job (a job's owner and GPUs do not change while it runs), so a
probe every few seconds does not become a Slurm query every few seconds. None: Slurm did not
answer (no client here, a timeout): the caller treats the job as unverifiable.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import OrderedDict
from typing import TypeVar

from resurrect.numbers import is_ascii_digits
from resurrect.sensors.node_agent.gpu_binding import job_gres_indices

TIMEOUT_S = 10.0
KEEP_S = 300.0
MAX_JOBS = 1024
MAX_OUTPUT = 1 << 20

_lock = threading.Lock()
_owners: OrderedDict[str, tuple[float, int | None]] = OrderedDict()
_gpus: OrderedDict[str, tuple[float, dict[str, list[int]] | None]] = OrderedDict()


def _run(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout[:MAX_OUTPUT].decode("utf-8", "replace")


_T = TypeVar("_T")


def _remember(cache: OrderedDict[str, tuple[float, _T]], job_id: str, value: _T) -> None:
    cache[job_id] = (time.monotonic(), value)
    cache.move_to_end(job_id)
    while len(cache) > MAX_JOBS:
        cache.popitem(last=False)


def job_owner_uid(job_id: str) -> int | None:
    """The uid of the job's owner, from Slurm (None: not known)."""
    with _lock:
        kept = _owners.get(job_id)
        if kept is not None and time.monotonic() - kept[0] < KEEP_S:
            return kept[1]
    text = _run(["squeue", "-h", "-j", job_id, "-o", "%U"])
    first = (text or "").strip().splitlines()[:1]
    uid = int(first[0]) if first and is_ascii_digits(first[0]) else None
    if uid is not None:
        with _lock:
            _remember(_owners, job_id, uid)
    return uid


def job_gpus(job_id: str) -> dict[str, list[int]] | None:
    """Per node, the GPU indices the job holds there (Slurm's GRES IDX); {} when it holds
    none, None when Slurm did not answer or its answer was ambiguous."""
    with _lock:
        kept = _gpus.get(job_id)
        if kept is not None and time.monotonic() - kept[0] < KEEP_S:
            return kept[1]
    text = _run(["scontrol", "show", "job", "-d", job_id])
    found = job_gres_indices(text) if text is not None else None
    if found is not None:
        with _lock:
            _remember(_gpus, job_id, found)
    return found
