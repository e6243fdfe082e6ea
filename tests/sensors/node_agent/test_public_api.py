"""The node agent's public surface is pinned: changing it is a deliberate act."""

from __future__ import annotations

import sensors.node_agent as agent
from resurrect.node_health_contracts import node_health_workflow_id


def test_all_is_pinned() -> None:
    assert sorted(agent.__all__) == sorted(
        [
            "AGENT_STOPPED_SIGNAL",
            "FINDINGS_SIGNAL",
            "HEALTH_QUERY",
            "HEARTBEAT_SIGNAL",
            "NODE_HEALTH_WORKFLOW",
            "REPORT_NODE_FAULT_ACTIVITY",
            "AgentSettings",
            "AgentStopped",
            "DeliveryError",
            "FakeGpu",
            "FakeNvml",
            "FindingLimiter",
            "GpuVerdict",
            "KernelLogSource",
            "LineScanner",
            "NodeAgent",
            "NodeFaultReport",
            "NodeFaultResult",
            "NodeFindings",
            "NodeHealth",
            "NodeHealthInput",
            "NodeHeartbeat",
            "NodeVerdict",
            "NvmlApi",
            "NvmlSource",
            "NvmlStatus",
            "PrintReporter",
            "Reading",
            "Reporter",
            "TemporalReporter",
            "classify",
            "load_pynvml",
            "node_health_workflow_id",
            "run_check",
            "verdict_from",
        ]
    )
    for name in agent.__all__:
        assert getattr(agent, name) is not None


def test_names_are_stable() -> None:
    assert (agent.NODE_HEALTH_WORKFLOW, agent.HEARTBEAT_SIGNAL, agent.FINDINGS_SIGNAL) == (
        "NodeHealthWorkflow",
        "heartbeat",
        "findings",
    )
    assert agent.REPORT_NODE_FAULT_ACTIVITY == "node_health.report_node_fault"
    assert node_health_workflow_id("c1", "gpu-7") == "node-health/c1/gpu-7"


def test_default_settings() -> None:
    settings = agent.AgentSettings(node_name="n")
    assert (settings.interval_s, settings.heartbeat_interval_s, settings.silence_threshold_s) == (
        5.0,
        2.0,
        6.0,
    )
