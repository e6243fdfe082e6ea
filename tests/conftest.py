"""Shared fixtures: the real Temporal dev server, the time-skipping test server and the real
local Slurm cluster (``cluster``: reset before and after each test)."""

from support.slurm import cluster, local_slurm
from support.temporal import temporal_client, temporal_server, time_skipping

__all__ = ["cluster", "local_slurm", "temporal_client", "temporal_server", "time_skipping"]
