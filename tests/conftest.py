"""Shared fixtures: the real Temporal dev server and the real local Slurm cluster."""

from support.slurm import local_slurm
from support.temporal import temporal_client, temporal_server

__all__ = ["local_slurm", "temporal_client", "temporal_server"]
