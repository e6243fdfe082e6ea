"""The demo's scenarios, one module per fault, by the name ``--scenario`` takes.

Each is a :class:`~resurrect.demo.scenarios.base.Scenario`: how the demo sets up for the
fault, how it injects it, what it expects resurrect to do and how it verifies that. A new
scenario is one module and one entry in :data:`SCENARIOS`.
"""

from __future__ import annotations

from resurrect.demo.scenarios.base import Fault, OneFault, Scenario
from resurrect.demo.scenarios.checkpoint_damage import CheckpointDamage
from resurrect.demo.scenarios.crash_loop import CrashLoop
from resurrect.demo.scenarios.gpu_error import GpuError
from resurrect.demo.scenarios.hang import Hang
from resurrect.demo.scenarios.host_faults import Freeze, Partition
from resurrect.demo.scenarios.node_loss import NodeLoss
from resurrect.demo.scenarios.straggler import Straggler
from resurrect.demo.stage import DemoError

__all__ = ["SCENARIOS", "Fault", "OneFault", "Scenario", "scenario_named"]

SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        NodeLoss(),
        GpuError(),
        CheckpointDamage(),
        Hang(),
        Straggler(),
        CrashLoop(),
        Partition(),
        Freeze(),
    )
}


def scenario_named(name: str) -> Scenario:
    """The scenario ``--scenario name`` runs; DemoError naming the known ones otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise DemoError(f"unknown demo scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
