"""NvmlSource over the fake NVML: every reading, and every kind of NVML trouble."""

from __future__ import annotations

from support.clock import Clock

from resurrect.contracts import SignalKind
from resurrect.sensors.node_agent import nvml_api as api
from resurrect.sensors.node_agent.fake_nvml import FakeGpu, FakeNvml
from resurrect.sensors.node_agent.nvml_source import NvmlSource
from resurrect.sensors.node_agent.render import kernel_pci


def opened(nvml: FakeNvml, **kwargs: object) -> NvmlSource:
    source = NvmlSource(nvml, **kwargs)  # type: ignore[arg-type]
    status = source.open()
    assert status.available, status.reason
    return source


def by_metric(readings: list, gpu: str) -> dict[str, str]:  # type: ignore[type-arg]
    return {r.metric: r.text for r in readings if r.gpu == gpu}


def test_kernel_pci_matches_the_kernel_xid_form() -> None:
    assert kernel_pci("00000000:3B:00.0") == "0000:3b:00"
    assert kernel_pci("0000:b1:00.0") == "0000:b1:00"
    assert kernel_pci("garbage") == "garbage"


def test_healthy_gpu_yields_one_reading_per_metric(nvml: FakeNvml) -> None:
    source = opened(nvml)
    assert source.status.gpu_count == 8
    assert source.status.driver == "570.124.06"
    readings = source.poll()
    gpu0 = by_metric(readings, "0")
    assert gpu0 == {
        "ecc": "nvml gpu=0 pci=0000:18:00 ecc uncorrectable_volatile=0 uncorrectable_aggregate=0",
        "row_remap": (
            "nvml gpu=0 pci=0000:18:00 row_remap correctable=0 uncorrectable=0 "
            "pending=no failure=no"
        ),
        "recovery_action": "nvml gpu=0 pci=0000:18:00 recovery_action action=none",
        "clocks": "nvml gpu=0 pci=0000:18:00 clocks event_reasons=none",
        "nvlink_summary": "nvml gpu=0 pci=0000:18:00 nvlink links=18 active=18 inactive=0",
    }
    assert {r.gpu for r in readings} == {str(i) for i in range(8)}
    assert all(r.kind is SignalKind.GPU_METRIC for r in readings)
    assert readings[0].uuid == nvml.gpus[0].uuid


def test_every_metric_renders_its_bad_value(nvml: FakeNvml) -> None:
    gpu = nvml.gpus[2]
    gpu.ecc_volatile, gpu.ecc_aggregate = 3, 7
    gpu.retired_pending = True
    gpu.row_remap_pending, gpu.row_remap_failure, gpu.remap_uncorrectable = True, True, 2
    gpu.recovery_action = 2
    gpu.clock_reasons = 0x40 | 0x04
    texts = by_metric(opened(nvml).poll(), "2")
    assert "uncorrectable_volatile=3 uncorrectable_aggregate=7" in texts["ecc"]
    assert texts["retired_pages"].endswith("retired_pages pending=yes")
    assert "uncorrectable=2 pending=yes failure=yes" in texts["row_remap"]
    assert texts["recovery_action"].endswith("recovery_action action=node_reboot")
    assert texts["clocks"].endswith("event_reasons=sw_power_cap,hw_thermal_slowdown")


def test_nvlink_transition_and_error_deltas_over_the_window(nvml: FakeNvml) -> None:
    clock = Clock()
    source = opened(nvml, clock=clock, nvlink_window_s=60.0)
    gpu = nvml.gpus[1]
    gpu.nvlink_errors[(4, api.NVLINK_COUNTERS["crc_flit"])] = 1000  # lifetime total: no delta
    first = by_metric(source.poll(), "1")
    assert "nvlink_errors" not in first and "nvlink_state" not in first

    clock.now += 5
    gpu.nvlink_up[7] = False
    gpu.nvlink_errors[(4, api.NVLINK_COUNTERS["crc_flit"])] = 1250
    gpu.nvlink_errors[(4, api.NVLINK_COUNTERS["recovery"])] = 2
    second = source.poll_gpu(source.gpus[1])
    texts = [r.text for r in second]
    assert "nvml gpu=1 pci=0000:28:00 nvlink link=7 state=down previous=up" in texts
    assert (
        "nvml gpu=1 pci=0000:28:00 nvlink_errors link=4 window_s=60 replay=0 recovery=2 "
        "crc_flit=250 crc_data=0"
    ) in texts
    assert "nvml gpu=1 pci=0000:28:00 nvlink links=18 active=17 inactive=1" in texts

    clock.now += 5  # still inside the window: the delta is still there
    assert "nvlink_errors" in [r.metric for r in source.poll_gpu(source.gpus[1])]
    clock.now += 61  # the window passed with no new errors: no delta any more
    third = [r.metric for r in source.poll_gpu(source.gpus[1])]
    assert "nvlink_errors" not in third
    assert "nvlink_state" not in third  # a link that stays down is not a new transition


def test_not_supported_calls_are_skipped_quietly_and_not_retried() -> None:
    nvml = FakeNvml(
        [
            FakeGpu(
                0, ecc_volatile=None, recovery_action=None, nvlink_up=[], row_remap_supported=False
            )
        ]
    )
    source = opened(nvml)
    for _ in range(3):
        metrics = {r.metric for r in source.poll()}
        assert metrics == {"clocks"}
    assert nvml.calls["nvmlDeviceGetRemappedRows"] == 1
    assert nvml.calls["nvmlDeviceGetTotalEccErrors"] == 1
    assert nvml.calls["nvmlDeviceGetNvLinkState"] == 1


def test_lost_gpu_yields_lost_reading_and_others_are_still_read(nvml: FakeNvml) -> None:
    source = opened(nvml)
    nvml.gpus[5].lost = True
    readings = source.poll()
    lost = [r for r in readings if r.gpu == "5"]
    assert [(r.metric, r.kind) for r in lost] == [("lost", SignalKind.GPU_EVENT)]
    assert lost[0].text == "nvml gpu=5 pci=0000:68:00 lost code=NVML_ERROR_GPU_IS_LOST"
    assert {r.gpu for r in readings} == {str(i) for i in range(8)}
    assert len([r for r in readings if r.gpu == "6"]) == 5
    calls = nvml.calls["nvmlDeviceGetTotalEccErrors"]
    assert [r.metric for r in source.poll() if r.gpu == "5"] == ["lost"]
    assert (
        nvml.calls["nvmlDeviceGetTotalEccErrors"] == calls + 14
    )  # 7 GPUs x (volatile, aggregate); GPU 5 is not called again


def test_gpu_lost_at_enumeration(nvml: FakeNvml) -> None:
    nvml.gpus[3].lost = True
    source = opened(nvml)
    assert source.gpus[3].lost and source.gpus[3].handle is None
    assert [r.metric for r in source.poll() if r.gpu == "3"] == ["lost"]


def test_other_nvml_errors_become_error_readings_for_that_gpu_only(nvml: FakeNvml) -> None:
    source = opened(nvml)
    nvml.fail("nvmlDeviceGetRemappedRows", 4, code=api.NVML_ERROR_RESET_REQUIRED)
    nvml.fail("nvmlDeviceGetCurrentClocksEventReasons", 4, code=api.NVML_ERROR_UNKNOWN)
    readings = source.poll()
    errors = [r.text for r in readings if r.metric == "nvml_error"]
    assert errors == [
        "nvml gpu=4 pci=0000:58:00 error call=row_remap code=NVML_ERROR_RESET_REQUIRED",
        "nvml gpu=4 pci=0000:58:00 error call=clocks code=NVML_ERROR_UNKNOWN",
    ]
    assert "ecc" in by_metric(readings, "4")  # the GPU's other readings still come
    nvml.clear_failures()
    assert "row_remap" in by_metric(source.poll(), "4")  # transient errors are retried


def test_library_missing_is_a_clear_status_not_an_exception() -> None:
    source = NvmlSource(FakeNvml.with_gpus(2, library_missing=True))
    status = source.open()
    assert not status.available
    assert status.reason == "NVML library not found (no NVIDIA driver on this machine)"
    assert source.poll() == []
    source.close()


def test_bindings_missing_and_no_gpus() -> None:
    assert NvmlSource(None).open().reason == "NVML Python bindings (nvidia-ml-py) not installed"
    empty = NvmlSource(FakeNvml([]))
    status = empty.open()
    assert (status.available, status.reason) == (False, "no GPUs")


def test_real_pynvml_without_driver_reports_library_missing() -> None:
    source = NvmlSource(api.load_pynvml())
    status = source.open()
    if status.available:  # pragma: no cover - only on a GPU machine
        assert status.gpu_count > 0
    else:
        assert "NVML library not found" in status.reason or "initialise" in status.reason


def test_xid_event_is_rendered_as_the_kernel_line(nvml: FakeNvml) -> None:
    source = opened(nvml)
    assert source.open_events() == 8
    assert source.wait_event(10) == []
    nvml.emit_xid(3, 79)
    [reading] = source.wait_event(1000)
    assert reading.kind is SignalKind.GPU_EVENT
    assert reading.gpu == "3" and reading.pci == "0000:48:00"
    assert reading.text.startswith("NVRM: Xid (PCI:0000:48:00): 79, pid='<unknown>'")


def test_event_registration_failure_on_one_gpu_keeps_the_others(nvml: FakeNvml) -> None:
    source = opened(nvml)
    nvml.fail("nvmlDeviceRegisterEvents", 2, code=api.NVML_ERROR_NOT_SUPPORTED)
    assert source.open_events() == 7
    nvml.emit_xid(2, 48)  # not registered: never delivered
    nvml.emit_xid(6, 48)
    [reading] = source.wait_event(1000)
    assert reading.gpu == "6"


def test_event_wait_errors_do_not_raise(nvml: FakeNvml) -> None:
    source = opened(nvml)
    source.open_events()
    nvml.fail("nvmlEventSetWait_v2", code=api.NVML_ERROR_UNKNOWN)
    assert source.wait_event(10) == []
