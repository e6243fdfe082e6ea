"""Shared fixtures: the real Temporal dev server and the real local Slurm cluster."""

from support.temporal import temporal_client, temporal_server

__all__ = ["temporal_client", "temporal_server"]

try:  # the Slurm fixtures (tests/support/slurm.py)
    from support.slurm import *  # noqa: F403
except ImportError:  # pragma: no cover - only while the module is being written
    pass
