"""Shared fixtures: the real Temporal dev server, the time-skipping test server and the real
local Slurm cluster (``cluster``: reset before and after each test); the order in which test
processes take files (:mod:`support.scheduling`)."""

import pytest
from support.scheduling import longest_files_first
from support.slurm import cluster, local_slurm
from support.temporal import temporal_client, temporal_server, time_skipping

__all__ = ["cluster", "local_slurm", "temporal_client", "temporal_server", "time_skipping"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest_files_first(items)
