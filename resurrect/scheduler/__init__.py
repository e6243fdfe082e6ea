"""The scheduler interface and its implementations (Slurm CLI now; pyslurm; later Kubernetes)."""

from resurrect.scheduler.base import DRAIN_REASON_PREFIX, Scheduler

__all__ = ["DRAIN_REASON_PREFIX", "Scheduler"]
