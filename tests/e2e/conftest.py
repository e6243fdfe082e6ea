"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from resurrect.demo.local_cluster import LocalSlurm


@pytest.fixture
def cluster(local_slurm: LocalSlurm) -> Iterator[LocalSlurm]:
    """The real local Slurm cluster, every node up and undrained before and after."""
    local_slurm.reset()
    yield local_slurm
    local_slurm.reset()
