"""A real local Slurm cluster for tests (deploy/local-slurm), as a pytest fixture.

Use in a conftest::

    from support.slurm import cluster, local_slurm  # (session-scoped, 4 nodes; per test)

or build another one with :func:`local_slurm_fixture` (different size/scope/name). The
fixture starts the cluster in a fresh ``/tmp/resurrect-slurm-*`` state dir on free ports,
yields a :class:`LocalSlurm` (from :mod:`resurrect.demo.local_cluster`), and stops it (by
pidfile) at the end.

Skips (with the reason) when not root or the Slurm binaries are missing, unless
``RESURRECT_REQUIRE_SLURM`` is set (CI): then it fails loudly instead, and start.sh installs
missing packages.

``RESURRECT_SLURM_VERSION`` (``22.05``, ``24.11``, ``26.05``; unset: the host's) chooses the
Slurm every cluster runs (``deploy/run-tests.sh --slurm VER``). The cluster's client
commands are then put first on this process's ``PATH`` while it runs, so resurrect's
scheduler, the services the tests start and their helper processes all talk to the cluster
with its own version's commands, as a site's would.
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
    requested_slurm_version,
    restd_unavailable_reason,
    restd_unsupported_reason,
    slurm_unavailable_reason,
    start_local_slurm,
    stop_local_slurm,
)
from support.requirements import missing, required

__all__ = [
    "DEPLOY_DIR",
    "LocalSlurm",
    "cluster",
    "free_port_block",
    "local_slurm",
    "local_slurm_fixture",
    "requested_slurm_version",
    "restd_unavailable_reason",
    "slurm_release",
    "slurm_unavailable_reason",
    "start_local_slurm",
    "stop_local_slurm",
]


def local_slurm_fixture(
    nodes: int = 4,
    scope: Any = "session",
    name: str = "local_slurm",
    jobcomp_script: str | None = None,
    restd: bool = False,
    prolog: str | None = None,
) -> Any:
    """Build a pytest fixture that yields a running :class:`LocalSlurm` (``restd``: with
    slurmrestd; skipped where the Slurm version has none, unless required; ``prolog``: the
    cluster's ``Prolog=``)."""

    @pytest.fixture(scope=scope, name=name)
    def _fixture() -> Iterator[LocalSlurm]:
        unsupported = restd_unsupported_reason() if restd else None
        if unsupported is not None:
            pytest.skip(unsupported)  # also in CI: nothing of this version to test
        reason = restd_unavailable_reason() if restd else slurm_unavailable_reason()
        # as root in CI, start.sh installs what is missing; otherwise: fail in CI, skip here
        if reason is not None and not (required() and os.geteuid() == 0):
            missing(reason)
        cluster = start_local_slurm(
            nodes=nodes, jobcomp_script=jobcomp_script, restd=restd, prolog=prolog
        )
        path_before = os.environ.get("PATH", "")
        wanted = requested_slurm_version()
        if wanted is not None:
            if not cluster.slurm_version.startswith(f"{wanted}."):
                stop_local_slurm(cluster)
                pytest.fail(f"asked for Slurm {wanted}, the cluster runs {cluster.slurm_version}")
            os.environ["PATH"] = os.pathsep.join([str(cluster.bin_dir), path_before])
        try:
            yield cluster
        finally:
            os.environ["PATH"] = path_before
            stop_local_slurm(cluster)

    return _fixture


def slurm_release(cluster: LocalSlurm) -> tuple[int, int]:
    """``(major, minor)`` of the Slurm the cluster runs, e.g. ``(24, 11)``: for tests that
    name a difference between versions."""
    major, minor = cluster.slurm_version.split(".")[:2]
    return int(major), int(minor)


local_slurm = local_slurm_fixture()


@pytest.fixture
def cluster(local_slurm: LocalSlurm) -> Iterator[LocalSlurm]:
    """The session's local Slurm cluster, every node up and undrained and no job left,
    before and after the test."""
    local_slurm.reset()
    yield local_slurm
    local_slurm.reset()
