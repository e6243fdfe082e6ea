"""The soak's samples of the cluster (benchmarks/chaos/soak.py): what a sample says about
drained nodes is what slurmctld answered, never a guess.

Found by the 60-minute soak (seed 11): slurmctld was down for a restart (20:51:24-20:51:30)
when a sample read the drain census; the failed read was recorded as "nothing drained", so
node6, drained all along (slurmctld's log shows no change to it), looked resumed at 3345 s
and drained again at 3352 s, a false drain no one did.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.chaos.history import Sample
from benchmarks.chaos.invariants import NoFalseDrain
from benchmarks.chaos.soak import Soak, SoakSettings
from resurrect.contracts import NodeInfo
from resurrect.errors import SchedulerError
from resurrect.testing import FakeScheduler

REASON = "resurrect: gpu.hardware job 102 [recover/c/102/0]"


class ControllerRestarting(FakeScheduler):
    """slurmctld is not answering: every read fails."""

    async def drain_census(self) -> tuple[int, list[NodeInfo]]:
        raise SchedulerError("slurm_load_node error: Unable to contact slurm controller")


@dataclass
class Cluster:
    fake: FakeScheduler

    def scheduler(self) -> FakeScheduler:
        return self.fake


def soak_on(scheduler: FakeScheduler) -> Soak:
    soak = Soak(SoakSettings(minutes=1, seed=1), say=lambda line: None)
    soak.cluster = Cluster(scheduler)  # type: ignore[assignment]
    return soak


async def test_a_sample_records_the_drains_slurm_shows() -> None:
    scheduler = FakeScheduler.with_nodes(3)
    await scheduler.drain_node("node2", REASON)
    soak = soak_on(scheduler)
    await soak._sample_once()
    assert [s.drained for s in soak.history.samples] == [{"node2": REASON}]


async def test_a_census_slurmctld_did_not_answer_makes_no_sample() -> None:
    soak = soak_on(ControllerRestarting.with_nodes(3))
    await soak._sample_once()
    assert soak.history.samples == []


async def test_a_drain_seen_across_a_controller_restart_is_one_drain() -> None:
    scheduler = FakeScheduler.with_nodes(3)
    await scheduler.drain_node("node2", REASON)
    soak = soak_on(scheduler)
    await soak._sample_once()
    soak.cluster = Cluster(ControllerRestarting.with_nodes(3))  # type: ignore[assignment]
    await soak._sample_once()
    soak.cluster = Cluster(scheduler)  # type: ignore[assignment]
    await soak._sample_once()
    samples = soak.history.samples
    assert len(samples) == 2
    # without a fault recorded before the first sample, the drain is false once, not twice
    assert len(NoFalseDrain().check(soak.history)) == 1
    assert all(isinstance(s, Sample) and s.drained == {"node2": REASON} for s in samples)
