"""What each GPU of this node is doing, and which rank of a job drives it.

Per GPU, through NVML: utilisation (%), power draw (W), the SM clock and its maximum (MHz)
and the active clock event ("throttle") reasons. :func:`rank_gpu_activity` joins them with
the job's rank processes through Slurm's GPU binding (:mod:`.gpu_binding`), so straggler
detection can compare ranks by their GPUs (a GPU whose SM clock lags its busy peers', or the
hardware slowing it down) and a hang's or straggler's recovery gets the node agent's word on
the culprit's GPUs (:func:`slowdown_evidence`, hardware evidence in plans/decide.py rule 7).

Only the GPUs Slurm says the job holds on this node (GRES ``IDX``) are read for it; which of
them a rank drives is its environment's word (a label). A reading is the node agent's
evidence only for a GPU of the job's Slurm allocation here; where Slurm names none (no GRES
data), the pairing rests on the job's environment alone and the evidence is the job's
(``source="job_output"``, :data:`JOB_CONTROLLED_FIELD`): it never drains a node nor makes a
restart free (plans/decide.py).

A reading NVML does not support on a GPU is None; a lost GPU reads as ``lost``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from resurrect.contracts import Evidence, FaultClass, SignalKind
from resurrect.evidence_trust import JOB_CONTROLLED_FIELD
from resurrect.sensors.node_agent import nvml_api as api
from resurrect.sensors.node_agent.gpu_binding import GpuRef, bound_gpu
from resurrect.sensors.node_agent.nvml_source import Gpu, NvmlSource
from resurrect.sensors.node_agent.render import metric_line
from resurrect.stacks.processes import RankProcess

log = logging.getLogger(__name__)

NVML_CLOCK_SM = 1  # nvmlClockType_t
# Clock event reasons that mean the hardware itself slows the GPU down.
HARDWARE_SLOWDOWN_REASONS = frozenset(
    {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)
SLOWDOWN_RULE = "gpu.clocks.hw_slowdown"  # the shipped rule for the same reading


@dataclass(frozen=True, slots=True)
class GpuActivity:
    index: int
    pci: str
    uuid: str | None
    utilisation_pct: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    reasons: tuple[str, ...] = ()
    lost: bool = False

    @property
    def hardware_slowdown(self) -> list[str]:
        return [r for r in self.reasons if r in HARDWARE_SLOWDOWN_REASONS]

    def line(self) -> str:
        """The canonical reading, as the rule packs read NVML metrics."""
        values: dict[str, object] = {
            "util_pct": self.utilisation_pct if self.utilisation_pct is not None else "na",
            "power_w": f"{self.power_w:.0f}" if self.power_w is not None else "na",
            "sm_mhz": self.sm_clock_mhz if self.sm_clock_mhz is not None else "na",
            "sm_max_mhz": self.max_sm_clock_mhz if self.max_sm_clock_mhz is not None else "na",
            "event_reasons": list(self.reasons),
        }
        return metric_line(str(self.index), self.pci, "activity", values)


def _optional(nvml: api.NvmlApi, name: str, *args: Any) -> Any:
    """One NVML call, None when the binding lacks it or the GPU does not support it."""
    fn: Callable[..., Any] | None = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        if api.error_code(exc) == api.NVML_ERROR_GPU_IS_LOST:
            raise
        return None


def read_activity(nvml: api.NvmlApi, gpu: Gpu) -> GpuActivity:
    """One GPU's activity now (each reading None when unsupported)."""
    if gpu.lost or gpu.handle is None:
        return GpuActivity(gpu.index, gpu.pci, gpu.uuid, lost=True)
    handle = gpu.handle
    try:
        rates = _optional(nvml, "nvmlDeviceGetUtilizationRates", handle)
        power_mw = _optional(nvml, "nvmlDeviceGetPowerUsage", handle)
        sm = _optional(nvml, "nvmlDeviceGetClockInfo", handle, NVML_CLOCK_SM)
        sm_max = _optional(nvml, "nvmlDeviceGetMaxClockInfo", handle, NVML_CLOCK_SM)
        mask = _optional(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    except nvml.NVMLError:
        return GpuActivity(gpu.index, gpu.pci, gpu.uuid, lost=True)
    reasons = tuple(
        name for bit, name in api.CLOCK_EVENT_REASONS.items() if mask is not None and mask & bit
    )
    return GpuActivity(
        gpu.index,
        gpu.pci,
        gpu.uuid,
        utilisation_pct=int(rates.gpu) if rates is not None else None,
        power_w=power_mw / 1000.0 if power_mw is not None else None,
        sm_clock_mhz=int(sm) if sm is not None else None,
        max_sm_clock_mhz=int(sm_max) if sm_max is not None else None,
        reasons=reasons,
    )


@dataclass(frozen=True, slots=True)
class RankGpu:
    """One rank's GPU and what it is doing."""

    rank: int
    node: str | None
    activity: GpuActivity
    # the GPU is one Slurm gave the job on this node (GRES); False: only the rank's
    # environment pairs it with the job
    gres_verified: bool = False


def _find(gpus: Sequence[GpuActivity], ref: GpuRef) -> GpuActivity | None:
    for gpu in gpus:
        if ref.uuid is not None and gpu.uuid is not None and gpu.uuid.startswith(ref.uuid):
            return gpu
        if ref.index is not None and gpu.index == ref.index:
            return gpu
    return None


def rank_gpu_activity(
    processes: Sequence[RankProcess],
    gpus: Sequence[GpuActivity],
    job_gpus_here: Sequence[int] | None = None,
) -> list[RankGpu]:
    """Each rank's GPU activity, for the ranks whose binding names a GPU read here.

    ``job_gpus_here``: the GPU indices Slurm gave the job on this node (GRES), None when not
    known. With them, a GPU outside them is never read for the job (a rank pointing its
    ``CUDA_VISIBLE_DEVICES`` at another job's GPU gets nothing), and a job holding one GPU
    here needs no environment at all."""
    allowed = list(job_gpus_here) if job_gpus_here is not None else None
    out: list[RankGpu] = []
    for process in processes:
        if process.rank is None:
            continue
        ref = GpuRef(index=allowed[0]) if allowed is not None and len(allowed) == 1 else None
        ref = ref or bound_gpu(
            process, {process.node: allowed} if process.node and allowed else None
        )
        found = _find(gpus, ref) if ref is not None else None
        if found is None:
            continue
        if allowed is not None and found.index not in allowed:
            log.info(
                "rank %s names GPU %s, not one Slurm gave its job here: not read",
                process.rank,
                found.index,
            )
            continue
        out.append(RankGpu(process.rank, process.node, found, gres_verified=allowed is not None))
    return out


def slowdown_evidence(ranks: Sequence[RankGpu]) -> list[Evidence]:
    """The node agent's word on ranks whose GPU the hardware slows down, or that is lost."""
    out: list[Evidence] = []
    for item in ranks:
        gpu = item.activity
        if gpu.lost:
            text, rule, fault = f"nvml gpu={gpu.index} pci={gpu.pci} lost", "gpu.nvml.lost", None
        elif gpu.hardware_slowdown:
            text, rule, fault = gpu.line(), SLOWDOWN_RULE, FaultClass.JOB_STRAGGLER
        else:
            continue
        out.append(
            Evidence(
                kind=SignalKind.GPU_EVENT if gpu.lost else SignalKind.GPU_METRIC,
                text=text,
                rule=rule,
                role="root" if gpu.lost else "diagnostic",
                fault_class=fault or FaultClass.GPU_HARDWARE,
                host=item.node,
                rank=item.rank,
                gpu=str(gpu.index),
                fields={"reasons": ",".join(gpu.hardware_slowdown)}
                | ({} if item.gres_verified else {JOB_CONTROLLED_FIELD: "gpu binding"}),
                source="node_agent" if item.gres_verified else "job_output",
            )
        )
    return out


class LocalGpus:
    """This node's GPUs through NVML, opened on first use; [] where there is no NVML (no
    driver, no nvidia-ml-py) or no GPU. ``nvml``: a fake for tests. Thread-safe."""

    def __init__(self, nvml: api.NvmlApi | None = None) -> None:
        self._given = nvml
        self._nvml: api.NvmlApi | None = None
        self._source: NvmlSource | None = None
        self._lock = threading.Lock()

    def read(self) -> list[GpuActivity]:
        with self._lock:
            if self._source is None:
                self._nvml = self._given if self._given is not None else api.load_pynvml()
                self._source = NvmlSource(self._nvml)
                status = self._source.open()
                if not status.available:
                    log.info("no GPU activity here: %s", status.reason)
            if self._nvml is None or not self._source.status.available:
                return []
            return [read_activity(self._nvml, gpu) for gpu in self._source.gpus]


# This machine's GPUs, shared by everything in the process that reads them.
LOCAL_GPUS = LocalGpus()
