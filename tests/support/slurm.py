"""A real local Slurm cluster for tests (deploy/local-slurm), as a pytest fixture.

Use in a conftest::

    from support.slurm import local_slurm  # noqa: F401  (session-scoped, 4 nodes)

or build another one with :func:`local_slurm_fixture` (different size/scope/name). The
fixture starts the cluster in a fresh ``/tmp/resurrect-slurm-*`` state dir on free ports,
yields a :class:`LocalSlurm` (from :mod:`resurrect.demo.local_cluster`), and stops it (by
pidfile) at the end.

Skips (with the reason) when not root or the Slurm binaries are missing, unless
``RESURRECT_REQUIRE_SLURM`` is set (CI): then it fails loudly instead, and start.sh installs
missing packages.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from resurrect.demo.local_cluster import (
    DEPLOY_DIR,
    LocalSlurm,
    free_port_block,
    slurm_unavailable_reason,
    start_local_slurm,
    stop_local_slurm,
)
from support.requirements import missing, required

__all__ = [
    "DEPLOY_DIR",
    "LocalSlurm",
    "free_port_block",
    "local_slurm",
    "local_slurm_fixture",
    "slurm_unavailable_reason",
    "start_local_slurm",
    "stop_local_slurm",
]


def local_slurm_fixture(
    nodes: int = 4,
    scope: Any = "session",
    name: str = "local_slurm",
    jobcomp_script: str | None = None,
) -> Any:
    """Build a pytest fixture that yields a running :class:`LocalSlurm`."""

    @pytest.fixture(scope=scope, name=name)
    def _fixture() -> Iterator[LocalSlurm]:
        reason = slurm_unavailable_reason()
        # as root in CI, start.sh installs what is missing; otherwise: fail in CI, skip here
        if reason is not None and not (required() and os.geteuid() == 0):
            missing(reason)
        cluster = start_local_slurm(nodes=nodes, jobcomp_script=jobcomp_script)
        try:
            yield cluster
        finally:
            stop_local_slurm(cluster)

    return _fixture


local_slurm = local_slurm_fixture()
