"""checkpoint-damage: a node dies and the newest checkpoint is torn with it (its largest
shard truncated); resurrect quarantines the torn one and the job resumes from the one
before."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from resurrect.demo.scenarios.base import Fault, OneFault
from resurrect.demo.scenarios.node_loss import kill_node
from resurrect.demo.stage import DemoError, Stage, checkpoint_steps


def damage_newest_checkpoint(ckpt_dir: Path) -> str:
    """Truncate the largest shard of the newest complete checkpoint (a torn write); the
    shard's path."""
    steps = checkpoint_steps(ckpt_dir)
    if not steps:
        raise DemoError("no checkpoint to damage")
    newest = ckpt_dir / f"step_{steps[-1]}"
    shards = sorted(
        (p for p in newest.iterdir() if p.is_file() and p.suffix == ".distcp"),
        key=lambda p: p.stat().st_size,
    )
    if not shards:
        raise DemoError(f"{newest} has no shard files")
    victim = shards[-1]
    with open(victim, "r+b") as handle:
        handle.truncate(victim.stat().st_size // 2)
    return str(victim)


class CheckpointDamage(OneFault):
    name = "checkpoint-damage"
    summary = "a node dies, its newest checkpoint torn; the job resumes from the one before"
    holds_for_fault = True

    async def inject(self, stage: Stage, victim: str) -> Fault:
        # the node first: once a rank is gone the job writes no newer checkpoint, so the one
        # torn is the newest whatever the load (resurrect reads it only after Slurm reports
        # the node, seconds later)
        fault = await kill_node(stage, victim)
        damaged = damage_newest_checkpoint(stage.ckpt_dir)
        stage.say(f"the crash tore the newest checkpoint: truncated {damaged}")
        return replace(fault, damaged_checkpoint=damaged)
