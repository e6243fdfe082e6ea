"""straggler: one rank runs a quarter of the time (SIGSTOP/SIGCONT); resurrect names it from
who waits for whom and restarts the job when the arithmetic says a restart pays off."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

from resurrect.demo.scenarios.base import Fault, OneFault
from resurrect.demo.stage import DemoSettings, Stage

# One rank runs 1/4 of the time (SIGSTOP 150 ms, SIGCONT 50 ms); the operator's policy asks
# for a restart when it pays off, judged after 15 s of straggling; the job is long enough
# (remaining steps) for a restart to pay off.
STRAGGLER_STOP_S, STRAGGLER_RUN_S = 0.15, 0.05
STRAGGLER_POLICY = {"straggler_duration_s": 15, "straggler_action": "restart"}
STRAGGLER_TRAIN_STEPS = 4000


async def duty_cycle(pid: int) -> None:
    """Slow one process down for real: stopped most of the time, until cancelled or gone."""
    try:
        while True:
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(STRAGGLER_STOP_S)
            os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(STRAGGLER_RUN_S)
    except ProcessLookupError:
        return
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


class Straggler(OneFault):
    name = "straggler"
    summary = "a rank runs a quarter of the time; it is named from who waits for whom"
    moves_away = False
    runs_to_end = False

    def operator_policy(self, settings: DemoSettings) -> dict[str, Any]:
        return {"progress": STRAGGLER_POLICY}

    def train_steps(self, settings: DemoSettings) -> int:
        return max(settings.train_steps, STRAGGLER_TRAIN_STEPS)

    def checkpoint_before_fault(self, settings: DemoSettings) -> int | None:
        return settings.ckpt_every  # slowing down needs no checkpoint to fall back to

    async def inject(self, stage: Stage, victim: str) -> Fault:
        rank, pid = await asyncio.to_thread(stage.rank_on, victim)
        at = time.time()
        duty = asyncio.create_task(duty_cycle(pid))
        stage.say(
            f"FAULT: rank {rank} (pid {pid}) on {victim} slowed: runs"
            f" {STRAGGLER_RUN_S * 1000:.0f} ms of every"
            f" {(STRAGGLER_RUN_S + STRAGGLER_STOP_S) * 1000:.0f} ms (SIGSTOP/SIGCONT)"
        )

        async def end() -> None:
            duty.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await duty

        return Fault(at=at, node=victim, stopped_rank=rank, end=end)
