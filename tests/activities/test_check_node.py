"""The repair workflow's check of a drained node: a node Slurm does not hear is not returned
(its leftover steps are ended by slurmctld only while the node is kept out), and one that
registers while the check waits is."""

from __future__ import annotations

import asyncio

from temporalio.testing import ActivityEnvironment

from resurrect.activities.operator import OperatorActivities
from resurrect.config import ResurrectConfig
from resurrect.operator.models import NodeCheck
from resurrect.testing import FakeScheduler


def checking(wait_s: float) -> tuple[OperatorActivities, FakeScheduler]:
    config = ResurrectConfig.model_validate(
        {
            "isolation": {"health_check_argv": ["true"]},
            "repair": {"registration_wait_s": wait_s},
        }
    )
    scheduler = FakeScheduler.with_nodes(2)
    return OperatorActivities(scheduler, config), scheduler


async def cut_off_and_drained(scheduler: FakeScheduler, node: str) -> None:
    await scheduler.drain_node(node, "resurrect: node.lost job 110 [recover/c/110/0]")
    drained = scheduler.nodes[node]
    scheduler.nodes[node] = drained.model_copy(update={"flags": [*drained.flags, "NOT_RESPONDING"]})


async def test_a_node_slurm_does_not_hear_fails_its_check() -> None:
    activities, scheduler = checking(0)
    await cut_off_and_drained(scheduler, "node1")
    check: NodeCheck = await ActivityEnvironment().run(activities.check_node, "node1")
    assert check.drained_by_resurrect and not check.healthy
    assert "NOT_RESPONDING" in check.detail


async def test_a_node_that_registers_while_the_check_waits_passes_it() -> None:
    activities, scheduler = checking(10)
    await cut_off_and_drained(scheduler, "node1")

    async def registers() -> None:
        await asyncio.sleep(0.5)
        heard = scheduler.nodes["node1"]
        scheduler.nodes["node1"] = heard.model_copy(
            update={"flags": [f for f in heard.flags if f != "NOT_RESPONDING"]}
        )

    check, _ = await asyncio.gather(
        ActivityEnvironment().run(activities.check_node, "node1"), registers()
    )
    assert check.drained_by_resurrect and check.healthy, check
