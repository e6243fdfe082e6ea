"""GPU activity through (fake) NVML, joined with a job's ranks through Slurm's binding."""

from __future__ import annotations

from resurrect.contracts import FaultClass, SignalKind
from resurrect.evidence_trust import hardware_evidence
from resurrect.sensors.node_agent.fake_nvml import FakeNvml
from resurrect.sensors.node_agent.gpu_activity import (
    LocalGpus,
    rank_gpu_activity,
    slowdown_evidence,
)
from resurrect.sensors.node_agent.nvml_api import NVML_ERROR_NOT_SUPPORTED
from resurrect.stacks.processes import RankProcess

HW_THERMAL = 0x040
SW_POWER_CAP = 0x004


def ranks(node: str = "gpu07") -> list[RankProcess]:
    """Four ranks of one step on GPUs 4-7, renumbered 0-3 by the device cgroup."""
    return [
        RankProcess(
            1000 + r,
            r,
            node,
            "S",
            8,
            local_rank=r,
            cuda_visible_devices="0,1,2,3",
            slurm_gpus="4-7",
        )
        for r in range(4)
    ]


def test_each_gpu_reads_utilisation_power_sm_clocks_and_reasons() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.gpus[1].utilisation_pct, nvml.gpus[1].power_mw = 97, 612_000
    nvml.gpus[1].sm_clock_mhz, nvml.gpus[1].clock_reasons = 1410, HW_THERMAL | SW_POWER_CAP
    [idle, busy] = LocalGpus(nvml).read()
    assert (busy.index, busy.utilisation_pct, busy.power_w) == (1, 97, 612.0)
    assert (busy.sm_clock_mhz, busy.max_sm_clock_mhz) == (1410, 1980)
    assert busy.reasons == ("sw_power_cap", "hw_thermal_slowdown")
    assert busy.hardware_slowdown == ["hw_thermal_slowdown"]
    assert busy.line().startswith("nvml gpu=1 pci=")
    assert "util_pct=97 power_w=612 sm_mhz=1410 sm_max_mhz=1980" in busy.line()
    assert idle.hardware_slowdown == []


def test_unsupported_readings_are_none_and_a_missing_nvml_reads_nothing() -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.gpus[0].power_mw = None
    nvml.fail("nvmlDeviceGetClockInfo", code=NVML_ERROR_NOT_SUPPORTED)
    [gpu] = LocalGpus(nvml).read()
    assert gpu.power_w is None and gpu.sm_clock_mhz is None and gpu.utilisation_pct == 0
    assert LocalGpus(FakeNvml(library_missing=True)).read() == []
    assert LocalGpus(FakeNvml()).read() == []  # no GPUs


def test_a_lost_gpu_reads_as_lost() -> None:
    nvml = FakeNvml.with_gpus(2)
    reader = LocalGpus(nvml)
    reader.read()
    nvml.gpus[0].lost = True
    assert [g.lost for g in reader.read()] == [True, False]


def test_ranks_get_the_gpu_slurm_bound_them_to() -> None:
    nvml = FakeNvml.with_gpus(8)
    for gpu in nvml.gpus:
        gpu.sm_clock_mhz = 1000 + gpu.index
    found = rank_gpu_activity(ranks(), LocalGpus(nvml).read())
    assert [(r.rank, r.activity.index, r.activity.sm_clock_mhz) for r in found] == [
        (0, 4, 1004),
        (1, 5, 1005),
        (2, 6, 1006),
        (3, 7, 1007),
    ]


SLURM_GPUS_HERE = [4, 5, 6, 7]  # scontrol show job -d: GRES=gpu:4(IDX:4-7) on gpu07


def test_a_hardware_slowdown_is_the_node_agents_hardware_evidence_about_the_rank() -> None:
    nvml = FakeNvml.with_gpus(8)
    nvml.gpus[6].clock_reasons = HW_THERMAL
    nvml.gpus[5].clock_reasons = SW_POWER_CAP  # software capping: not hardware trouble
    found = rank_gpu_activity(ranks(), LocalGpus(nvml).read(), SLURM_GPUS_HERE)
    [evidence] = slowdown_evidence(found)
    assert (evidence.rank, evidence.gpu, evidence.host) == (2, "6", "gpu07")
    assert evidence.rule == "gpu.clocks.hw_slowdown" and evidence.source == "node_agent"
    assert evidence.kind is SignalKind.GPU_METRIC
    assert evidence.fault_class is FaultClass.JOB_STRAGGLER and evidence.role == "diagnostic"
    assert hardware_evidence([evidence], "gpu07") == [evidence]
    nvml.gpus[7].lost = True
    lost = slowdown_evidence(rank_gpu_activity(ranks(), LocalGpus(nvml).read(), SLURM_GPUS_HERE))
    assert [(e.rank, e.fault_class) for e in lost] == [
        (2, FaultClass.JOB_STRAGGLER),
        (3, FaultClass.GPU_HARDWARE),
    ]


def test_without_slurms_word_on_the_jobs_gpus_a_slowdown_is_the_jobs_word() -> None:
    """No GRES data: only the ranks' environment pairs them with GPUs, so the reading is
    job-controlled evidence: never hardware evidence that drains the node."""
    nvml = FakeNvml.with_gpus(8)
    nvml.gpus[6].clock_reasons = HW_THERMAL
    [evidence] = slowdown_evidence(rank_gpu_activity(ranks(), LocalGpus(nvml).read()))
    assert evidence.source == "job_output" and evidence.fields["job_controlled"]
    assert hardware_evidence([evidence], "gpu07") == []


def test_a_job_holding_one_gpu_here_needs_no_environment() -> None:
    nvml = FakeNvml.with_gpus(8)
    lone = RankProcess(1000, 0, "gpu07", "S", 1)  # no CUDA_VISIBLE_DEVICES, no LOCAL_RANK
    [found] = rank_gpu_activity([lone], LocalGpus(nvml).read(), [3])
    assert (found.activity.index, found.gres_verified) == (3, True)
