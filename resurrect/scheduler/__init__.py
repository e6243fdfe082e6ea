"""The scheduler interface and its implementations (Slurm CLI now; pyslurm; later Kubernetes)."""

from resurrect.scheduler.base import DRAIN_REASON_PREFIX, Scheduler
from resurrect.scheduler.factory import make_scheduler
from resurrect.scheduler.hostlist import expand_hostlist
from resurrect.scheduler.slurm_cli import SlurmCli

__all__ = ["DRAIN_REASON_PREFIX", "Scheduler", "SlurmCli", "expand_hostlist", "make_scheduler"]
