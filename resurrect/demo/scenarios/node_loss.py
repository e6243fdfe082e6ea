"""node-loss: one of the job's nodes dies; resurrect drains it and requeues the job, which
resumes from its last checkpoint on healthy nodes and ends as an uninterrupted run ends."""

from __future__ import annotations

import asyncio
import time

from resurrect.demo.scenarios.base import Fault, OneFault
from resurrect.demo.stage import Stage


async def kill_node(stage: Stage, victim: str) -> Fault:
    """Kill ``victim``: its slurmd and every process of the job on it."""
    at = time.time()
    await asyncio.to_thread(stage.cluster.kill_node, victim)
    stage.say(f"FAULT: killed node {victim} (its slurmd and every process of the job on it)")
    return Fault(at=at, node=victim)


class NodeLoss(OneFault):
    name = "node-loss"
    summary = "a node of the job dies; it is drained and the job resumes on healthy nodes"
    holds_for_fault = True

    async def inject(self, stage: Stage, victim: str) -> Fault:
        return await kill_node(stage, victim)
