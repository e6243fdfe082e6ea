"""Reading the GPUs through NVML: polled counters and states, and critical Xid events.

:class:`NvmlSource` receives the NVML module (``pynvml`` or a fake) and turns what it
reports into :class:`Reading` objects, one canonical text line each. It never raises for
one GPU's trouble: a call that is not supported is skipped from then on, a GPU that is lost
yields a ``lost`` reading and is not called again, any other NVML error yields an ``error``
reading, and the other GPUs are read as usual. All methods are blocking (NVML calls can
block); the agent runs them in threads.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from resurrect.contracts import SignalKind
from resurrect.sensors.node_agent import nvml_api as api
from resurrect.sensors.node_agent.models import Reading
from resurrect.sensors.node_agent.render import UNKNOWN_PCI, kernel_pci, metric_line, xid_line

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Gpu:
    """One GPU as NVML enumerated it."""

    index: int
    handle: Any
    pci: str = UNKNOWN_PCI
    uuid: str | None = None
    name: str = ""
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)
    nvlinks: int | None = None  # links probed (None until the first poll)
    link_up: dict[int, bool] = field(default_factory=dict)
    link_counters: dict[int, deque[tuple[float, dict[str, int]]]] = field(default_factory=dict)


@dataclass(frozen=True)
class NvmlStatus:
    """Whether NVML is usable here, and if not, why (shown to the operator as is)."""

    available: bool
    reason: str
    driver: str | None = None
    gpu_count: int = 0
    retryable: bool = False  # worth opening again later (driver not loaded yet, ...)


class _GpuLost(Exception):
    """Internal: a call said NVML_ERROR_GPU_IS_LOST; stop reading this GPU."""


class NvmlSource:
    """Polls NVML counters and waits for NVML Xid events, GPU by GPU."""

    def __init__(
        self,
        nvml: api.NvmlApi | None,
        *,
        nvlink_window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self._nvml = nvml
        self._window = nvlink_window_s
        self._clock = clock
        self._now = now
        self._gpus: list[Gpu] = []
        self._event_set: Any = None
        self._initialised = False
        # NVML is thread-safe, but close() must not free what a poll or a wait is using.
        self._poll_lock = threading.Lock()
        self._event_lock = threading.Lock()
        self.status = NvmlStatus(False, "not opened")

    @property
    def gpus(self) -> list[Gpu]:
        return list(self._gpus)

    def gpu_by_pci(self, pci: str) -> Gpu | None:
        for gpu in self._gpus:
            if gpu.pci == pci:
                return gpu
        return None

    # -- lifecycle -----------------------------------------------------------------------

    def open(self) -> NvmlStatus:
        """Initialise NVML and enumerate the GPUs; never raises for a missing library."""
        nvml = self._nvml
        if nvml is None:
            self.status = NvmlStatus(False, "NVML Python bindings (nvidia-ml-py) not installed")
            return self.status
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            code = api.error_code(exc)
            what = (
                "NVML library not found (no NVIDIA driver on this machine)"
                if code in api.UNAVAILABLE_ERRORS
                else f"NVML failed to initialise: {api.error_name(code)} ({exc})"
            )
            self.status = NvmlStatus(False, what, retryable=True)
            return self.status
        except OSError as exc:
            self.status = NvmlStatus(
                False, f"NVML library could not be loaded: {exc}", retryable=True
            )
            return self.status
        self._initialised = True
        driver: str | None
        try:
            driver = api.text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            driver = None
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            self.status = NvmlStatus(False, f"cannot count GPUs: {exc}", driver, retryable=True)
            return self.status
        self._close_event_set()
        self._gpus = [self._enumerate(index) for index in range(count)]
        reason = "ok" if count else "no GPUs"
        self.status = NvmlStatus(count > 0, reason, driver, count)
        return self.status

    def _enumerate(self, index: int) -> Gpu:
        nvml = self._require()
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            code = api.error_code(exc)
            log.warning("GPU %d: cannot get a handle: %s", index, api.error_name(code))
            return Gpu(index=index, handle=None, lost=code == api.NVML_ERROR_GPU_IS_LOST)
        gpu = Gpu(index=index, handle=handle)
        try:
            gpu.pci = kernel_pci(_bus_id(nvml.nvmlDeviceGetPciInfo(handle)))
            gpu.uuid = api.text(nvml.nvmlDeviceGetUUID(handle))
            gpu.name = api.text(nvml.nvmlDeviceGetName(handle))
        except nvml.NVMLError as exc:
            code = api.error_code(exc)
            gpu.lost = code == api.NVML_ERROR_GPU_IS_LOST
            log.warning("GPU %d: cannot read its identity: %s", index, api.error_name(code))
        return gpu

    def close(self) -> None:
        """Free the event set and shut NVML down, after any poll or event wait in progress."""
        with self._poll_lock, self._event_lock:
            self._close()

    def _close_event_set(self) -> None:
        nvml = self._nvml
        if nvml is None or self._event_set is None:
            return
        try:
            nvml.nvmlEventSetFree(self._event_set)
        except nvml.NVMLError:
            log.debug("nvmlEventSetFree failed", exc_info=True)
        self._event_set = None

    def _close(self) -> None:
        nvml = self._nvml
        if nvml is None or not self._initialised:
            return
        self._close_event_set()
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            log.debug("nvmlShutdown failed", exc_info=True)
        self._initialised = False

    def _require(self) -> api.NvmlApi:
        if self._nvml is None:
            raise RuntimeError("NVML is not available")
        return self._nvml

    # -- polling -------------------------------------------------------------------------

    def poll(self) -> list[Reading]:
        """One reading per GPU and metric (plus NVLink transitions and error deltas)."""
        readings: list[Reading] = []
        with self._poll_lock:
            if not self._initialised:
                return readings
            for gpu in self._gpus:
                readings.extend(self.poll_gpu(gpu))
        return readings

    def poll_gpu(self, gpu: Gpu) -> list[Reading]:
        """Every reading of one GPU; a lost GPU yields just its ``lost`` reading."""
        if gpu.lost or gpu.handle is None:
            return [self._lost(gpu)]
        out: list[Reading] = []
        readers: tuple[Callable[[Gpu, list[Reading]], None], ...] = (
            self._ecc,
            self._retired_pages,
            self._row_remap,
            self._recovery_action,
            self._clock_reasons,
            self._nvlink,
        )
        try:
            for reader in readers:
                reader(gpu, out)
        except _GpuLost:
            gpu.lost = True
            out.append(self._lost(gpu))
        return out

    def _call(
        self, gpu: Gpu, metric: str, out: list[Reading], fn: Callable[[api.NvmlApi], Any]
    ) -> Any:
        """Run one NVML call ``fn(nvml)`` for ``metric``; None when it has nothing to say."""
        if metric in gpu.unsupported:
            return None
        nvml = self._require()
        try:
            return fn(nvml)
        except nvml.NVMLError as exc:
            code = api.error_code(exc)
            if code == api.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost from exc
            if code in api.QUIET_ERRORS:
                gpu.unsupported.add(metric)
                log.debug("GPU %d: %s not supported (%s)", gpu.index, metric, api.error_name(code))
                return None
            values = {"call": metric, "code": api.error_name(code)}
            out.append(self._reading(gpu, "nvml_error", "error", values))
            return None

    def _ecc(self, gpu: Gpu, out: list[Reading]) -> None:
        volatile = self._call(
            gpu,
            "ecc",
            out,
            lambda nvml: nvml.nvmlDeviceGetTotalEccErrors(
                gpu.handle, api.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, api.NVML_VOLATILE_ECC
            ),
        )
        if volatile is None:
            return
        aggregate = self._call(
            gpu,
            "ecc_aggregate",
            out,
            lambda nvml: nvml.nvmlDeviceGetTotalEccErrors(
                gpu.handle, api.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, api.NVML_AGGREGATE_ECC
            ),
        )
        values: dict[str, object] = {"uncorrectable_volatile": int(volatile)}
        if aggregate is not None:
            values["uncorrectable_aggregate"] = int(aggregate)
        out.append(self._reading(gpu, "ecc", "ecc", values))

    def _retired_pages(self, gpu: Gpu, out: list[Reading]) -> None:
        pending = self._call(
            gpu,
            "retired_pages",
            out,
            lambda nvml: nvml.nvmlDeviceGetRetiredPagesPendingStatus(gpu.handle),
        )
        if pending is None:
            return
        values = {"pending": int(pending) == api.NVML_FEATURE_ENABLED}
        out.append(self._reading(gpu, "retired_pages", "retired_pages", values))

    def _row_remap(self, gpu: Gpu, out: list[Reading]) -> None:
        rows = self._call(
            gpu, "row_remap", out, lambda nvml: nvml.nvmlDeviceGetRemappedRows(gpu.handle)
        )
        if rows is None:
            return
        correctable, uncorrectable, pending, failure = (int(value) for value in rows)
        values: dict[str, object] = {
            "correctable": correctable,
            "uncorrectable": uncorrectable,
            "pending": bool(pending),
            "failure": bool(failure),
        }
        out.append(self._reading(gpu, "row_remap", "row_remap", values))

    def _recovery_action(self, gpu: Gpu, out: list[Reading]) -> None:
        fields = self._call(
            gpu,
            "recovery_action",
            out,
            lambda nvml: nvml.nvmlDeviceGetFieldValues(
                gpu.handle, [api.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION]
            ),
        )
        if fields is None or len(fields) < 1:
            return
        value = fields[0]
        ret = int(getattr(value, "nvmlReturn", api.NVML_SUCCESS))
        if ret != api.NVML_SUCCESS:
            if ret == api.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost
            # Older drivers do not have the field: treat any failure as "not supported".
            gpu.unsupported.add("recovery_action")
            return
        code = _field_int(value)
        action = api.RECOVERY_ACTIONS.get(code, f"code_{code}")
        out.append(self._reading(gpu, "recovery_action", "recovery_action", {"action": action}))

    def _clock_reasons(self, gpu: Gpu, out: list[Reading]) -> None:
        nvml = self._require()
        getter = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if getter is None:
            gpu.unsupported.add("clocks")
            return
        mask = self._call(gpu, "clocks", out, lambda _nvml: getter(gpu.handle))
        if mask is None:
            return
        names = [name for bit, name in api.CLOCK_EVENT_REASONS.items() if int(mask) & bit]
        out.append(self._reading(gpu, "clocks", "clocks", {"event_reasons": names}))

    def _nvlink(self, gpu: Gpu, out: list[Reading]) -> None:
        if "nvlink" in gpu.unsupported:
            return
        nvml = self._require()
        limit = gpu.nvlinks if gpu.nvlinks is not None else api.NVML_NVLINK_MAX_LINKS
        active = inactive = 0
        probed = 0
        now = self._clock()
        for link in range(limit):
            try:
                up = int(nvml.nvmlDeviceGetNvLinkState(gpu.handle, link)) == 1
            except nvml.NVMLError as exc:
                code = api.error_code(exc)
                if code == api.NVML_ERROR_GPU_IS_LOST:
                    raise _GpuLost from exc
                if gpu.nvlinks is None:
                    break  # first poll: the first link NVML refuses ends the probe
                continue
            probed = link + 1
            active += up
            inactive += not up
            previous = gpu.link_up.get(link)
            gpu.link_up[link] = up
            if previous is True and not up:
                values = {"link": link, "state": "down", "previous": "up"}
                out.append(self._reading(gpu, "nvlink_state", "nvlink", values))
            if up:
                self._nvlink_counters(gpu, link, now, out)
        if gpu.nvlinks is None:
            gpu.nvlinks = probed
            if probed == 0:
                gpu.unsupported.add("nvlink")
                return
        values = {"links": gpu.nvlinks, "active": active, "inactive": inactive}
        out.append(self._reading(gpu, "nvlink_summary", "nvlink", values))

    def _nvlink_counters(self, gpu: Gpu, link: int, now: float, out: list[Reading]) -> None:
        nvml = self._require()
        counters: dict[str, int] = {}
        for name, counter in api.NVLINK_COUNTERS.items():
            try:
                value = nvml.nvmlDeviceGetNvLinkErrorCounter(gpu.handle, link, counter)
            except nvml.NVMLError as exc:
                if api.error_code(exc) == api.NVML_ERROR_GPU_IS_LOST:
                    raise _GpuLost from exc
                continue
            counters[name] = int(value)
        if not counters:
            return
        history = gpu.link_counters.setdefault(link, deque())
        history.append((now, counters))
        while len(history) > 1 and now - history[0][0] > self._window:
            history.popleft()
        oldest = history[0][1]
        deltas = {name: max(0, value - oldest.get(name, value)) for name, value in counters.items()}
        if any(deltas.values()):
            values: dict[str, object] = {"link": link, "window_s": int(self._window)}
            values.update(deltas)
            out.append(self._reading(gpu, "nvlink_errors", "nvlink_errors", values))

    # -- events --------------------------------------------------------------------------

    def open_events(self) -> int:
        """Register every readable GPU for critical Xid events; the number registered."""
        nvml = self._require()
        if not self._gpus:
            return 0
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.warning("NVML events unavailable: %s", api.error_name(api.error_code(exc)))
            return 0
        registered = 0
        for gpu in self._gpus:
            if gpu.handle is None or gpu.lost:
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(
                    gpu.handle, api.NVML_EVENT_TYPE_XID_CRITICAL_ERROR, self._event_set
                )
                registered += 1
            except nvml.NVMLError as exc:
                code = api.error_code(exc)
                gpu.lost = gpu.lost or code == api.NVML_ERROR_GPU_IS_LOST
                log.warning("GPU %d: no Xid events: %s", gpu.index, api.error_name(code))
        return registered

    def wait_event(self, timeout_ms: int) -> list[Reading]:
        """Block up to ``timeout_ms`` for one Xid event; its reading, or nothing."""
        nvml = self._require()
        with self._event_lock:
            if self._event_set is None:
                data = None
            else:
                try:
                    data = nvml.nvmlEventSetWait_v2(self._event_set, timeout_ms)
                except nvml.NVMLError as exc:
                    code = api.error_code(exc)
                    if code == api.NVML_ERROR_TIMEOUT:
                        return []
                    log.warning("NVML event wait failed: %s", api.error_name(code))
                    data = None
        if data is None:  # no event set, or a broken one: do not spin
            time.sleep(timeout_ms / 1000)
            return []
        if not int(data.eventType) & api.NVML_EVENT_TYPE_XID_CRITICAL_ERROR:
            return []
        gpu = self._gpu_of(data.device)
        pci = gpu.pci if gpu is not None else UNKNOWN_PCI
        return [
            Reading(
                kind=SignalKind.GPU_EVENT,
                source="nvml-event",
                metric="xid",
                text=xid_line(pci, int(data.eventData)),
                gpu=str(gpu.index) if gpu is not None else None,
                pci=pci,
                uuid=gpu.uuid if gpu is not None else None,
                observed_at=self._now(),
            )
        ]

    def _gpu_of(self, handle: Any) -> Gpu | None:
        nvml = self._require()
        for gpu in self._gpus:
            if gpu.handle is not None and _same_handle(gpu.handle, handle):
                return gpu
        try:
            index = int(nvml.nvmlDeviceGetIndex(handle))
        except nvml.NVMLError:
            return None
        return next((gpu for gpu in self._gpus if gpu.index == index), None)

    # -- readings ------------------------------------------------------------------------

    def _reading(self, gpu: Gpu, metric: str, label: str, values: Mapping[str, object]) -> Reading:
        return Reading(
            kind=SignalKind.GPU_METRIC,
            source="nvml",
            metric=metric,
            text=metric_line(str(gpu.index), gpu.pci, label, values),
            gpu=str(gpu.index),
            pci=gpu.pci,
            uuid=gpu.uuid,
            observed_at=self._now(),
        )

    def _lost(self, gpu: Gpu) -> Reading:
        values = {"code": api.error_name(api.NVML_ERROR_GPU_IS_LOST)}
        return Reading(
            kind=SignalKind.GPU_EVENT,
            source="nvml",
            metric="lost",
            text=metric_line(str(gpu.index), gpu.pci, "lost", values),
            gpu=str(gpu.index),
            pci=gpu.pci,
            uuid=gpu.uuid,
            observed_at=self._now(),
        )


def _same_handle(left: Any, right: Any) -> bool:
    """Whether two NVML device handles are the same device (ctypes pointers by address)."""
    if left is right or left == right:
        return True
    try:
        return bool(
            ctypes.cast(left, ctypes.c_void_p).value == ctypes.cast(right, ctypes.c_void_p).value
        )
    except (TypeError, ctypes.ArgumentError):
        return False


def _bus_id(pci_info: Any) -> str:
    bus_id = getattr(pci_info, "busId", None) or getattr(pci_info, "busIdLegacy", None)
    return api.text(bus_id) if isinstance(bus_id, str | bytes) else ""


def _field_int(value: Any) -> int:
    """The integer in an nvmlFieldValue_t, whatever its declared type."""
    union = value.value
    by_type = {1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    attribute = by_type.get(int(getattr(value, "valueType", 1)), "uiVal")
    return int(getattr(union, attribute))
