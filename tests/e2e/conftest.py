"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.service import ServiceConfigFor, service_config

from resurrect.config import ResurrectConfig
from resurrect.demo.local_cluster import LocalSlurm
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
