"""hang: one rank is stopped (SIGSTOP) between two saves and its peers block in gloo;
resurrect names the stopped rank from the ranks' stacks and restarts the job in place."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from resurrect.demo.scenarios.base import Fault, OneFault
from resurrect.demo.stage import Stage, checkpoint_steps


class Hang(OneFault):
    name = "hang"
    summary = "a rank is SIGSTOPped; it is named from the ranks' stacks, the job restarts"
    moves_away = False

    async def inject(self, stage: Stage, victim: str) -> Fault:
        # stop one rank between two saves: its peers block in gloo (a real stall)
        await stage.wait_step_line_after(max(checkpoint_steps(stage.ckpt_dir)))
        rank, pid = await asyncio.to_thread(stage.rank_on, victim)
        at = time.time()
        os.kill(pid, signal.SIGSTOP)
        stage.say(f"FAULT: stopped rank {rank} (pid {pid}) on {victim} with SIGSTOP")
        return Fault(at=at, node=victim, stopped_rank=rank)
