"""Which GPU each rank drives, from Slurm's GPU binding (environment and scontrol -d)."""

from __future__ import annotations

from pathlib import Path

from resurrect.sensors.node_agent.gpu_binding import (
    GpuRef,
    bound_gpu,
    gres_indices,
    job_gres_indices,
    parse_indices,
)
from resurrect.stacks.processes import RankProcess

FIXTURE = Path(__file__).parent.parent.parent / "fixtures" / "slurm"
DETAIL = (FIXTURE / "show-job-detail-gpus.txt").read_text()
# The GPU indices ``scontrol -d show job`` gives each node of the job in DETAIL.
DETAIL_GPUS = {"gpu07": list(range(8)), "gpu08": list(range(8)), "gpu11": [2, 3, 6, 7]}


def rank(local: int | None, visible: str = "", slurm: str = "", node: str = "gpu07") -> RankProcess:
    return RankProcess(
        pid=100 + (local or 0),
        rank=local,
        node=node,
        state="S",
        local_rank=local,
        cuda_visible_devices=visible,
        slurm_gpus=slurm,
    )


def test_index_lists() -> None:
    assert parse_indices("0-2,5") == [0, 1, 2, 5]
    assert parse_indices("3") == [3]
    assert parse_indices("") == parse_indices("0-") == parse_indices("5-2") == []
    assert parse_indices("$(reboot)") == []


def test_scontrol_show_job_detail_gives_each_nodes_gpu_indices() -> None:
    assert gres_indices(DETAIL) == DETAIL_GPUS
    # Slurm 22.05 spells it without the type and count
    assert gres_indices("     Nodes=n1 CPU_IDs=0-3 Mem=0 GRES=gpu(IDX:1)") == {"n1": [1]}
    assert gres_indices("     Nodes=n1 CPU_IDs=0-3 Mem=0 GRES=") == {}


def test_a_cgroup_renumbered_step_maps_through_slurm_step_gpus() -> None:
    # ConstrainDevices=yes: the step sees its GPUs 4-7 as 0-3
    assert bound_gpu(rank(2, "0,1,2,3", "4,5,6,7")) == GpuRef(index=6)


def test_without_a_device_cgroup_the_numbers_are_the_nodes() -> None:
    assert bound_gpu(rank(1, "4,5,6,7", "4,5,6,7")) == GpuRef(index=5)
    assert bound_gpu(rank(1, "4,5")) == GpuRef(index=5)  # no Slurm variables: CUDA's list


def test_one_device_per_task() -> None:
    assert bound_gpu(rank(5, "6", "6")) == GpuRef(index=6)
    assert bound_gpu(rank(5, "0", "6")) == GpuRef(index=6)  # renumbered inside its cgroup
    assert bound_gpu(rank(5, "1", "4,5,6,7")) == GpuRef(index=5)  # a position among the step's
    assert bound_gpu(rank(5, "1", "1,2")) is None  # index 1, or position 1 (GPU 2): unknown


def test_uuids_name_the_device_itself() -> None:
    assert bound_gpu(rank(1, "GPU-aaa,GPU-bbb")) == GpuRef(uuid="GPU-bbb")


def test_scontrol_indices_stand_in_for_a_missing_environment() -> None:
    job = {"gpu11": [2, 3, 6, 7]}
    assert bound_gpu(rank(3, node="gpu11"), job) == GpuRef(index=7)
    assert bound_gpu(rank(3, node="gpu12"), job) is None


def test_no_binding_or_an_ordinal_out_of_range_names_nothing() -> None:
    assert bound_gpu(rank(0)) is None
    assert bound_gpu(rank(4, "0,1")) is None
    assert bound_gpu(rank(None, "0,1")) is None  # two devices and no LOCAL_RANK
    assert bound_gpu(rank(None, "3")) == GpuRef(index=3)  # one device: that one


def test_a_jobs_gpus_come_only_from_slurms_own_detail_lines() -> None:
    text = DETAIL
    assert job_gres_indices(text) == DETAIL_GPUS
    forged = "     Nodes=gpu07 CPU_IDs=0 Mem=0 GRES=gpu(IDX:0-7)"
    # job text printed before or after Slurm's lines, imitating them: not known
    named = text.replace("JobName=llm-pretrain", f"JobName=x\n   NodeList=gpu07\n{forged}", 1)
    assert job_gres_indices(named) is None
    after = text + f"   Comment=x\n   NodeList=gpu07\n{forged}\n   MinCPUsNode=1\n"
    assert job_gres_indices(after) is None
    assert job_gres_indices("JobId=1 JobName=x\n   MinCPUsNode=1\n") is None  # no NodeList
