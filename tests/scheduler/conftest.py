"""Real-cluster fixtures for tests/scheduler.

``local_slurm`` (session scope) comes from tests/conftest.py (``from support.slurm import *``);
``slurm`` resets it so every test starts with all nodes idle and its own jobs gone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.slurm import LocalSlurm


@pytest.fixture
def slurm(local_slurm: LocalSlurm) -> Iterator[LocalSlurm]:
    local_slurm.reset()
    yield local_slurm
