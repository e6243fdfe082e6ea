"""A fake of the NVML Python API, for tests of the agent and of plugins that read GPUs.

:class:`FakeNvml` has the pynvml functions the agent calls (same names, same argument
order, same error type carrying ``.value``), backed by :class:`FakeGpu` records a test can
change while the agent runs::

    nvml = FakeNvml.with_gpus(8)
    nvml.gpus[3].row_remap_pending = True        # the next poll sees it
    nvml.emit_xid(5, 79)                         # the event waiter gets Xid 79 on GPU 5
    nvml.gpus[5].lost = True                     # every call on GPU 5: NVML_ERROR_GPU_IS_LOST
    nvml.fail("nvmlDeviceGetRemappedRows", 3, code=NVML_ERROR_NOT_SUPPORTED)
    nvml.delay("nvmlDeviceGetRemappedRows", 2.0)  # a call that hangs for 2 s (a sick GPU)
    FakeNvml(library_missing=True)               # nvmlInit: NVML_ERROR_LIBRARY_NOT_FOUND

It is thread-safe (the agent calls NVML from worker threads) and counts calls per function.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from resurrect.sensors.node_agent import nvml_api as api


class NVMLError(Exception):
    """pynvml's error shape: the nvmlReturn_t is ``.value``."""

    def __init__(self, value: int) -> None:
        super().__init__(api.error_name(value))
        self.value = value

    def __str__(self) -> str:
        return api.error_name(self.value)


@dataclass
class FakeGpu:
    """The state one fake GPU reports. ``None`` for a reading means "not supported"."""

    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = ""
    bus_id: str = ""
    ecc_volatile: int | None = 0
    ecc_aggregate: int | None = 0
    retired_pending: bool | None = None  # pre-Ampere page retirement
    remap_correctable: int = 0
    remap_uncorrectable: int = 0
    row_remap_pending: bool = False
    row_remap_failure: bool = False
    row_remap_supported: bool = True
    recovery_action: int | None = 0  # None: the driver lacks the field
    clock_reasons: int = 0
    # activity (sensors/node_agent/gpu_activity.py); None: not supported
    utilisation_pct: int | None = 0
    power_mw: int | None = 70_000
    sm_clock_mhz: int | None = 1980
    max_sm_clock_mhz: int | None = 1980
    nvlink_up: list[bool] = field(default_factory=lambda: [True] * 18)
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    lost: bool = False

    def __post_init__(self) -> None:
        if not self.uuid:
            self.uuid = f"GPU-{self.index:08x}-fake-0000-0000-{self.index:012x}"
        if not self.bus_id:
            self.bus_id = f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"


@dataclass
class FakePciInfo:
    busId: bytes


@dataclass
class FakeValue:
    uiVal: int


@dataclass
class FakeFieldValue:
    fieldId: int
    nvmlReturn: int
    value: FakeValue
    valueType: int = 1  # unsigned int


@dataclass
class FakeEventData:
    device: Any
    eventType: int
    eventData: int


@dataclass
class FakeUtilization:
    gpu: int
    memory: int = 0


@dataclass(frozen=True)
class FakeHandle:
    index: int


class FakeEventSet:
    """An event set: the GPUs registered on it."""

    def __init__(self) -> None:
        self.gpus: set[int] = set()


class FakeNvml:
    """The pynvml surface the agent uses, over editable :class:`FakeGpu` records."""

    NVMLError = NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        library_missing: bool = False,
        driver_version: str = "570.124.06",
    ) -> None:
        self.gpus: list[FakeGpu] = gpus if gpus is not None else []
        self.library_missing = library_missing
        self.driver_version = driver_version
        self.calls: Counter[str] = Counter()
        self.initialised = False
        self._failures: dict[tuple[str, int | None], int] = {}
        self._delays: dict[str, float] = {}
        self._events: deque[tuple[int, int]] = deque()
        self._cond = threading.Condition()
        self._event_sets: list[FakeEventSet] = []

    @classmethod
    def with_gpus(cls, count: int, **kwargs: Any) -> FakeNvml:
        return cls([FakeGpu(index=i) for i in range(count)], **kwargs)

    # -- test controls -------------------------------------------------------------------

    def fail(self, function: str, gpu: int | None = None, *, code: int) -> None:
        """Make ``function`` raise ``code`` (for one GPU, or all when ``gpu`` is None)."""
        with self._cond:
            self._failures[(function, gpu)] = code

    def clear_failures(self) -> None:
        with self._cond:
            self._failures.clear()
            self._delays.clear()

    def delay(self, function: str, seconds: float) -> None:
        """Make every call of ``function`` block for ``seconds`` first (a hung driver call)."""
        with self._cond:
            self._delays[function] = seconds

    def emit_xid(self, gpu: int, xid: int) -> None:
        """Queue a critical Xid event for ``gpu`` (delivered if it is registered)."""
        with self._cond:
            self._events.append((gpu, xid))
            self._cond.notify_all()

    # -- helpers -------------------------------------------------------------------------

    def _enter(self, function: str, handle: FakeHandle | None = None) -> FakeGpu | None:
        pause = self._delays.get(function)
        if pause:
            time.sleep(pause)
        with self._cond:
            self.calls[function] += 1
            if function != "nvmlInit" and not self.initialised:
                raise NVMLError(api.NVML_ERROR_UNINITIALIZED)
            gpu_index = handle.index if handle is not None else None
            for key in ((function, gpu_index), (function, None)):
                if key in self._failures:
                    raise NVMLError(self._failures[key])
        if handle is None:
            return None
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise NVMLError(api.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def _gpu(self, function: str, handle: FakeHandle) -> FakeGpu:
        gpu = self._enter(function, handle)
        assert gpu is not None
        return gpu

    # -- the pynvml surface --------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.library_missing:
            raise NVMLError(api.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(2)  # invalid argument
        handle = FakeHandle(index)
        self._gpu("nvmlDeviceGetHandleByIndex", handle)
        return handle

    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetIndex", handle).index

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:
        return FakePciInfo(busId=self._gpu("nvmlDeviceGetPciInfo", handle).bus_id.encode())

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        value = gpu.ecc_volatile if counter == api.NVML_VOLATILE_ECC else gpu.ecc_aggregate
        if value is None or error_type != api.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            raise NVMLError(api.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        if gpu.retired_pending is None:
            raise NVMLError(api.NVML_ERROR_NOT_SUPPORTED)
        return int(gpu.retired_pending)

    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        gpu = self._gpu("nvmlDeviceGetRemappedRows", handle)
        if not gpu.row_remap_supported:
            raise NVMLError(api.NVML_ERROR_NOT_SUPPORTED)
        return (
            gpu.remap_correctable,
            gpu.remap_uncorrectable,
            int(gpu.row_remap_pending),
            int(gpu.row_remap_failure),
        )

    def nvmlDeviceGetFieldValues(
        self, handle: FakeHandle, field_ids: list[int]
    ) -> list[FakeFieldValue]:
        gpu = self._gpu("nvmlDeviceGetFieldValues", handle)
        out = []
        for field_id in field_ids:
            if (
                field_id == api.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
                and gpu.recovery_action is not None
            ):
                out.append(
                    FakeFieldValue(field_id, api.NVML_SUCCESS, FakeValue(gpu.recovery_action))
                )
            else:
                out.append(FakeFieldValue(field_id, api.NVML_ERROR_NOT_SUPPORTED, FakeValue(0)))
        return out

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkState", handle)
        if not 0 <= link < len(gpu.nvlink_up):
            raise NVMLError(api.NVML_ERROR_NOT_SUPPORTED)
        return int(gpu.nvlink_up[link])

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: FakeHandle, link: int, counter: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkErrorCounter", handle)
        if not 0 <= link < len(gpu.nvlink_up):
            raise NVMLError(api.NVML_ERROR_NOT_SUPPORTED)
        return gpu.nvlink_errors.get((link, counter), 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_reasons

    def _supported(self, function: str, handle: FakeHandle, value: int | None) -> int:
        self._gpu(function, handle)
        if value is None:
            raise NVMLError(api.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:
        gpu = self.gpus[handle.index]
        name = "nvmlDeviceGetUtilizationRates"
        return FakeUtilization(self._supported(name, handle, gpu.utilisation_pct))

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._supported("nvmlDeviceGetPowerUsage", handle, self.gpus[handle.index].power_mw)

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        value = self.gpus[handle.index].sm_clock_mhz if clock_type == 1 else None
        return self._supported("nvmlDeviceGetClockInfo", handle, value)

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        value = self.gpus[handle.index].max_sm_clock_mhz if clock_type == 1 else None
        return self._supported("nvmlDeviceGetMaxClockInfo", handle, value)

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._enter("nvmlEventSetCreate")
        event_set = FakeEventSet()
        self._event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(
        self, handle: FakeHandle, event_types: int, event_set: FakeEventSet
    ) -> None:
        self._gpu("nvmlDeviceRegisterEvents", handle)
        if event_types & api.NVML_EVENT_TYPE_XID_CRITICAL_ERROR:
            event_set.gpus.add(handle.index)

    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeout_ms: int) -> FakeEventData:
        self._enter("nvmlEventSetWait_v2")
        with self._cond:
            ready = self._cond.wait_for(
                lambda: any(gpu in event_set.gpus for gpu, _ in self._events),
                timeout=timeout_ms / 1000,
            )
            if not ready:
                raise NVMLError(api.NVML_ERROR_TIMEOUT)
            for position, (gpu, xid) in enumerate(self._events):
                if gpu in event_set.gpus:
                    del self._events[position]
                    return FakeEventData(
                        FakeHandle(gpu), api.NVML_EVENT_TYPE_XID_CRITICAL_ERROR, xid
                    )
        raise NVMLError(api.NVML_ERROR_TIMEOUT)  # pragma: no cover - wait_for said ready

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self._enter("nvmlEventSetFree")
        if event_set in self._event_sets:
            self._event_sets.remove(event_set)
