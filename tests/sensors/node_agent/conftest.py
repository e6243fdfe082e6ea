"""Fixtures of the node agent tests: the shipped rule engine and a fake node."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from resurrect.rules.engine import RuleEngine, load_engine
from resurrect.sensors.node_agent.fake_nvml import FakeNvml

FIXED_NOW = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def engine() -> RuleEngine:
    """The engine over every shipped pack (the agent's production rules)."""
    return load_engine()


@pytest.fixture
def nvml() -> FakeNvml:
    """Eight healthy fake H100s with 18 NVLinks each."""
    return FakeNvml.with_gpus(8)
