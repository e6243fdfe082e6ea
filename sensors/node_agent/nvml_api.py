"""The slice of the NVML Python API (``pynvml`` from nvidia-ml-py) the agent uses.

The agent never imports pynvml itself: it receives a module (or an object) with this
surface, so tests and plugins can pass :class:`sensors.node_agent.fake_nvml.FakeNvml`.
Numeric constants below are NVML's ABI values (nvml.h) and identical in pynvml.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

# nvmlReturn_t values the agent distinguishes.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999

ERROR_NAMES: dict[int, str] = {
    1: "NVML_ERROR_UNINITIALIZED",
    2: "NVML_ERROR_INVALID_ARGUMENT",
    3: "NVML_ERROR_NOT_SUPPORTED",
    4: "NVML_ERROR_NO_PERMISSION",
    5: "NVML_ERROR_ALREADY_INITIALIZED",
    6: "NVML_ERROR_NOT_FOUND",
    7: "NVML_ERROR_INSUFFICIENT_SIZE",
    8: "NVML_ERROR_INSUFFICIENT_POWER",
    9: "NVML_ERROR_DRIVER_NOT_LOADED",
    10: "NVML_ERROR_TIMEOUT",
    11: "NVML_ERROR_IRQ_ISSUE",
    12: "NVML_ERROR_LIBRARY_NOT_FOUND",
    13: "NVML_ERROR_FUNCTION_NOT_FOUND",
    14: "NVML_ERROR_CORRUPTED_INFOROM",
    15: "NVML_ERROR_GPU_IS_LOST",
    16: "NVML_ERROR_RESET_REQUIRED",
    17: "NVML_ERROR_OPERATING_SYSTEM",
    18: "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    19: "NVML_ERROR_IN_USE",
    20: "NVML_ERROR_MEMORY",
    21: "NVML_ERROR_NO_DATA",
    999: "NVML_ERROR_UNKNOWN",
}

# Errors that mean "this GPU (or call) has nothing to say", not a fault.
QUIET_ERRORS = frozenset(
    {NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION, NVML_ERROR_FUNCTION_NOT_FOUND}
)
# Errors at nvmlInit that mean "no NVML on this machine".
UNAVAILABLE_ERRORS = frozenset(
    {NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_FUNCTION_NOT_FOUND}
)

NVML_SUCCESS = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18  # links the agent probes (pynvml's array bound is larger)
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x0000000000000008

# nvmlNvLinkErrorCounter_t
NVLINK_COUNTERS: dict[str, int] = {
    "replay": 0,
    "recovery": 1,
    "crc_flit": 2,
    "crc_data": 3,
}

# nvmlDeviceGpuRecoveryAction_t
RECOVERY_ACTIONS: dict[int, str] = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}

# nvmlClocksEventReasons bits (formerly "throttle reasons").
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


class NvmlApi(Protocol):
    """The pynvml functions the agent calls (pynvml's own names and signatures)."""

    @property
    def NVMLError(self) -> type[Exception]:
        """The exception every NVML call raises; ``.value`` is the nvmlReturn_t."""
        ...

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetIndex(self, handle: Any) -> int: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter: int) -> int: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> Any: ...
    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int: ...
    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None: ...
    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any: ...
    def nvmlEventSetFree(self, event_set: Any) -> None: ...


def error_code(exc: BaseException) -> int:
    """The nvmlReturn_t of an NVMLError (pynvml stores it as ``.value``)."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else NVML_ERROR_UNKNOWN


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"NVML_ERROR_{code}")


def load_pynvml() -> NvmlApi | None:
    """The real pynvml module, or None when nvidia-ml-py is not installed."""
    try:
        module: NvmlApi = importlib.import_module("pynvml")
    except ImportError:
        return None
    return module


def text(value: str | bytes) -> str:
    """pynvml returns bytes or str depending on version and call."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
