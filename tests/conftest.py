"""Shared fixtures: the real Temporal dev server, the time-skipping test server and the real
local Slurm cluster."""

from support.slurm import local_slurm
from support.temporal import temporal_client, temporal_server, time_skipping

__all__ = ["local_slurm", "temporal_client", "temporal_server", "time_skipping"]
