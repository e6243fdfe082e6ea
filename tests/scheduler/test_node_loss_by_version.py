"""What a lost node looks like to resurrect, on the Slurm version the tests run
(``RESURRECT_SLURM_VERSION``: 22.05, 24.11 or 26.05; docs/slurm-versions.md).

Checked to be the same on the three versions: the node reads NOT_RESPONDING before DOWN
(``SlurmdTimeout=5``), a ``--requeue`` job is requeued by slurmctld (never left in
NODE_FAIL) with its restart count up by one, and the next attempt sees
``SLURM_RESTART_COUNT`` equal to that count.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from support.slurm import LocalSlurm, slurm_release

from resurrect.contracts import JobState

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions]

# Each attempt appends its restart count to its output, then waits to be killed.
ATTEMPT_SCRIPT = """#!/bin/bash
echo "attempt SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-unset}"
srun sleep 600 &
sleep 600
wait
"""


async def test_a_lost_node_reads_not_responding_then_down_and_the_job_is_requeued(
    slurm: LocalSlurm,
) -> None:
    sched = slurm.scheduler()
    output = slurm.out_dir / f"attempts-{time.monotonic_ns()}.out"
    job_id = slurm.submit(
        ATTEMPT_SCRIPT,
        nodes=2,
        name="attempts",
        output=str(output),
        extra_args=["--open-mode=append"],
    )
    await asyncio.to_thread(slurm.wait_job_state, job_id, ["RUNNING"], 60)
    victim = (await sched.get_job(job_id)).nodes[1]
    t0 = time.monotonic()
    slurm.kill_node(victim)

    states: list[tuple[float, str, str]] = []  # (seconds, node state, job state)
    job_states: set[JobState] = set()
    restarted = None
    while time.monotonic() - t0 < 90:
        node = await sched.get_node(victim)
        job = await sched.get_job(job_id)
        job_states.add(job.state)
        seen = "+".join([node.state, *node.flags])
        if not states or states[-1][1:] != (seen, job.state.value):
            states.append((round(time.monotonic() - t0, 1), seen, job.state.value))
        if node.state == "DOWN" and job.restart_count == 1 and job.state is JobState.RUNNING:
            restarted = job
            break
        await asyncio.sleep(0.2)
    print(f"Slurm {slurm.slurm_version}: {states}")
    assert restarted is not None, f"not requeued and restarted within 90 s: {states}"
    assert victim not in restarted.nodes
    node_states = [s for _, s, _ in states]
    not_responding = [i for i, s in enumerate(node_states) if "NOT_RESPONDING" in s]
    down = [i for i, s in enumerate(node_states) if s.startswith("DOWN")]
    assert not_responding and down and not_responding[0] <= down[0], node_states
    # a --requeue job is requeued, never left in NODE_FAIL, on every version
    assert JobState.NODE_FAIL not in job_states, states

    def second_attempt_printed() -> bool:
        return output.exists() and "SLURM_RESTART_COUNT=1" in output.read_text()

    deadline = time.monotonic() + 30
    while not second_attempt_printed() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    lines = output.read_text().splitlines()
    attempts = [line for line in lines if line.startswith("attempt ")]
    # the first attempt has no SLURM_RESTART_COUNT, the second has 1 (22.05, 24.11, 26.05)
    assert attempts[:2] == [
        "attempt SLURM_RESTART_COUNT=unset",
        "attempt SLURM_RESTART_COUNT=1",
    ], (slurm_release(slurm), lines)
