"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.requirements import missing
from support.service import ServiceConfigFor, service_config

from resurrect.config import ResurrectConfig
from resurrect.demo.local_cluster import LocalSlurm, slurm_unavailable_reason
from resurrect.temporal.server import EmbeddedTemporal


@pytest.fixture
def cluster_config(
    cluster: LocalSlurm, temporal_server: EmbeddedTemporal, tmp_path: Path
) -> ServiceConfigFor:
    """The configuration of a service acting on the local cluster against the session's dev
    server, its state in the test's ``tmp_path``; ``overrides`` merged in per section:
    ``cluster_config(mode="observe")``."""

    def config_for(**overrides: Any) -> ResurrectConfig:
        return service_config(
            tmp_path, cluster.cluster_name, cluster.slurm_conf, temporal_server.address, **overrides
        )

    return config_for


@pytest.fixture
def demo_state_dir() -> Iterator[Path]:
    reason = slurm_unavailable_reason()
    if reason is not None:
        missing(reason)
    # jobs run as an unprivileged user: the state dir must be reachable (pytest's tmp is not)
    path = Path(tempfile.mkdtemp(prefix="resurrect-demo-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def demo_references(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this suite run keeps the uninterrupted runs' shas: one directory for all of
    its test processes (xdist's workers share the parent of their base temp), so each
    training setting is run uninterrupted once per run, not once per process."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return shared / "demo-references"
