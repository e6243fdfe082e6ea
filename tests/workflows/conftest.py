"""Fixtures of the workflow tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.operator_control import ConfigFor, make_config

from resurrect.config import ResurrectConfig
from resurrect.temporal.server import EmbeddedTemporal


@pytest.fixture
def operator_config(tmp_path: Path, temporal_server: EmbeddedTemporal) -> ConfigFor:
    """The operator-control tests' configuration (``support.operator_control.make_config``)
    on the session's dev server, its state in the test's ``tmp_path``; sections merged in:
    ``operator_config(isolation={"max_drain_nodes": 1})``."""

    def config_for(**sections: dict[str, object]) -> ResurrectConfig:
        return make_config(tmp_path, temporal_server.address, **sections)

    return config_for
