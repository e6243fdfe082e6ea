"""Run train.py as one task of ``srun`` per rank, with no torchrun (the Megatron, NeMo and
Lightning way): the rank and world size come from Slurm's ``SLURM_PROCID`` and
``SLURM_NTASKS``, set here for torch.distributed before train.py starts.

    srun --ntasks-per-node=1 python examples/train/srun_entry.py --ckpt-dir DIR

``MASTER_ADDR`` and ``MASTER_PORT`` come from the batch script (train-srun.sbatch).
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ.update(
        RANK=os.environ["SLURM_PROCID"],
        WORLD_SIZE=os.environ["SLURM_NTASKS"],
        LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"),
    )
    script = Path(__file__).with_name("train.py")
    sys.argv = [str(script), *sys.argv[1:]]
    runpy.run_path(str(script), run_name="__main__")
