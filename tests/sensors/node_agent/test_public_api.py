"""The node agent's public surface is pinned: changing it is a deliberate act."""

from __future__ import annotations

from support.public_api import describe, pinned

import resurrect.sensors.node_agent as agent
from resurrect.contracts.workflow_ids import node_health_workflow_id


def test_all_is_pinned() -> None:
    """Each exported name, what it is and where it lives: tests/fixtures/public-api/."""
    assert describe(agent) == pinned(agent)


def test_workflow_ids_are_stable() -> None:
    assert node_health_workflow_id("c1", "gpu-7") == "node-health/c1/gpu-7"


def test_default_settings() -> None:
    settings = agent.AgentSettings(node_name="n")
    assert (settings.interval_s, settings.heartbeat_interval_s, settings.silence_threshold_s) == (
        5.0,
        2.0,
        6.0,
    )
