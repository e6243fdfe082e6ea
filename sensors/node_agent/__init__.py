"""The node agent: watches a GPU node's health and reports it to the control plane.

Plugin authors and the worker import from here; :data:`__all__` is the public surface. What
the agent sends to the control plane (heartbeats, findings, the node-health workflow's names)
is a contract of that workflow: :mod:`resurrect.contracts.node_health`.
"""

from resurrect.config import AgentSettings
from resurrect.rules.engine import LineScanner
from resurrect.sensors.node_agent.agent import NodeAgent
from resurrect.sensors.node_agent.classify import classify
from resurrect.sensors.node_agent.fake_nvml import FakeGpu, FakeNvml
from resurrect.sensors.node_agent.kernel_log import KernelLogSource
from resurrect.sensors.node_agent.limiter import FindingLimiter
from resurrect.sensors.node_agent.models import GpuVerdict, NodeVerdict, Reading
from resurrect.sensors.node_agent.nvml_api import NvmlApi, load_pynvml
from resurrect.sensors.node_agent.nvml_source import NvmlSource, NvmlStatus
from resurrect.sensors.node_agent.reporters import (
    AgentReporter,
    DeliveryError,
    PrintReporter,
    TemporalReporter,
)
from resurrect.sensors.node_agent.verdict import run_check, verdict_from

__all__ = [
    "AgentReporter",
    "AgentSettings",
    "DeliveryError",
    "FakeGpu",
    "FakeNvml",
    "FindingLimiter",
    "GpuVerdict",
    "KernelLogSource",
    "LineScanner",
    "NodeAgent",
    "NodeVerdict",
    "NvmlApi",
    "NvmlSource",
    "NvmlStatus",
    "PrintReporter",
    "Reading",
    "TemporalReporter",
    "classify",
    "load_pynvml",
    "run_check",
    "verdict_from",
]
