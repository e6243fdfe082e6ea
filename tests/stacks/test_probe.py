"""What a node's agent answers to a probe, on its own node (fake NVML, rank processes as
/proc would show them): GPUs per rank through Slurm's binding; stacks only when asked."""

from __future__ import annotations

import pytest

import resurrect.stacks.collect as collect
import resurrect.stacks.probe as probe
from resurrect.sensors.node_agent.fake_nvml import FakeNvml
from resurrect.sensors.node_agent.gpu_activity import LocalGpus
from resurrect.stacks.classify import RankStack
from resurrect.stacks.flight_recorder import LastCollective
from resurrect.stacks.probe import StackProbeRequest, StackProbeResult, probe_here
from resurrect.stacks.processes import RankProcess


def test_a_gpu_probe_maps_this_nodes_ranks_to_their_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml.with_gpus(4)
    nvml.gpus[3].sm_clock_mhz, nvml.gpus[3].clock_reasons = 1305, 0x080  # power brake
    processes = [
        RankProcess(500 + r, r, node, "S", 4, local_rank=r % 2, cuda_visible_devices="0,1",
                    slurm_gpus="2,3")
        for r, node in ((0, "node1"), (1, "node1"), (2, "node2"), (3, "node2"))
    ]  # fmt: skip
    monkeypatch.setattr(probe, "LOCAL_GPUS", LocalGpus(nvml))

    def on_node(
        job_id: str, *, owner_uid: int, restart_count: int | None, node: str, slurm_conf: None
    ) -> list:
        assert (job_id, owner_uid, node, slurm_conf) == ("9", 1001, "node2", None)
        return [p for p in processes if p.node == node]

    monkeypatch.setattr(probe, "job_rank_processes", on_node)
    monkeypatch.setattr(collect, "job_gpus", lambda job_id: {"node1": [2, 3], "node2": [2, 3]})
    monkeypatch.setattr(probe, "collect_job_stacks", lambda *a, **k: pytest.fail("no stacks"))
    request = StackProbeRequest(
        cluster="c", node="node2", job_id="9", owner_uid=1001, stacks=False, ras=False
    )
    result = probe_here(request, here="node2")
    assert result.ranks == [] and result.evidence == []
    readings = [(g.rank, g.activity.index, g.activity.sm_clock_mhz) for g in result.gpus]
    assert readings == [(2, 2, 1980), (3, 3, 1305)]
    [slow] = [g for g in result.rank_gpus() if g.activity.hardware_slowdown]
    assert (slow.rank, slow.node, slow.activity.reasons) == (
        3,
        "node2",
        ("hw_power_brake_slowdown",),
    )
    wire = StackProbeResult.model_validate_json(result.model_dump_json())
    assert wire.gpus == result.gpus  # as it travels through Temporal, and back


def test_without_nvml_a_probe_has_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "LOCAL_GPUS", LocalGpus(FakeNvml(library_missing=True)))
    request = StackProbeRequest(cluster="c", node="n1", job_id="9", stacks=False)
    assert probe_here(request).gpus == []


def test_a_probe_carries_each_ranks_flight_recorder_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CONSTRUCTED records: the node's answer carries them to the follower, which judges."""
    found = [
        RankStack(1, "n1", 11, "S", None, error="py-spy timed out", world_size=2,
                  collectives=(LastCollective(1, "0", 7, "nccl:all_reduce", "started"),)),
        RankStack(0, "n1", 10, "S", None, error="py-spy timed out", world_size=2,
                  flight_recorder_note="no dump at /tmp/nccl_trace_rank_0"),
    ]  # fmt: skip
    monkeypatch.setattr(probe, "collect_job_stacks", lambda *a, **k: found)
    request = StackProbeRequest(cluster="c", node="n1", job_id="5", ras=False, gpus=False)
    result = StackProbeResult.model_validate_json(probe_here(request).model_dump_json())
    [one, zero] = result.stacks()
    assert one.collectives == (LastCollective(1, "0", 7, "nccl:all_reduce", "started"),)
    assert zero.collectives == () and zero.flight_recorder_note.startswith("no dump at")


def test_a_probe_for_another_node_answers_nothing_of_it() -> None:
    """The agent names ranks after its own node: a request for another node (sent to the
    wrong queue) gets no ranks, never this node's ranks under that node's name."""
    request = StackProbeRequest(cluster="c", node="node9", job_id="5", owner_uid=0, ras=False)
    result = probe_here(request, here="node1")
    assert (result.node, result.ranks, result.gpus) == ("node1", [], [])
