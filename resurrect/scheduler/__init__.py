"""The scheduler interface (:class:`Scheduler`), the factory that builds the configured backend
(Slurm CLI, pyslurm, Slurm REST), and hostlist expansion."""

from resurrect.scheduler.base import DRAIN_REASON_PREFIX, Scheduler
from resurrect.scheduler.factory import make_scheduler
from resurrect.scheduler.hostlist import expand_hostlist
from resurrect.scheduler.slurm_cli import SlurmCli

__all__ = ["DRAIN_REASON_PREFIX", "Scheduler", "SlurmCli", "expand_hostlist", "make_scheduler"]
