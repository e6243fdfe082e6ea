"""``resurrect agent check``: a one-shot health verdict of the node's GPUs.

Exit codes (usable as a Slurm ``HealthCheckProgram`` wrapper and before resuming a drained
node): **0** healthy, or no GPUs / no NVML on this machine; **1** unhealthy (at least one
GPU has a finding of class gpu.hardware, network.fabric or node.lost, or any root finding).
Other findings (e.g. a thermally throttled GPU) are warnings and do not fail the check.

Slurm ignores a HealthCheckProgram's exit code; the program must drain the node itself.
``resurrect agent check --drain`` does so with the reason ``resurrect: agent check: ...``
(resurrect's prefix, so resurrect may resume the node once a later check passes)::

    HealthCheckProgram=/opt/resurrect/venv/bin/resurrect agent check --drain
    HealthCheckInterval=300
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime

from resurrect.contracts import DEFAULT_ACTION, Evidence, FaultClass
from resurrect.rules.engine import LineScanner
from resurrect.sensors.node_agent.classify import classify
from resurrect.sensors.node_agent.models import GpuVerdict, NodeVerdict, Reading, VerdictStatus
from resurrect.sensors.node_agent.nvml_api import NvmlApi
from resurrect.sensors.node_agent.nvml_source import NvmlSource, utcnow

UNHEALTHY_CLASSES = frozenset(
    {FaultClass.GPU_HARDWARE, FaultClass.NETWORK_FABRIC, FaultClass.NODE_LOST}
)
_ROLE_ORDER = {"root": 0, "diagnostic": 1, "cascade": 2}


def is_unhealthy(evidence: Evidence) -> bool:
    return evidence.role == "root" or evidence.fault_class in UNHEALTHY_CLASSES


def _reason(evidence: Evidence) -> str:
    cls = evidence.fault_class.value if evidence.fault_class else "unclassified"
    return f"{evidence.rule} ({cls}, {evidence.role}): {evidence.text}"


def verdict_from(
    node: str,
    readings: list[Reading],
    evidence: list[Evidence],
    *,
    gpu_ids: Mapping[str, tuple[str | None, str | None]],
    now: datetime,
) -> NodeVerdict:
    """Fold one round of readings and their evidence into a verdict (pure; tested directly).

    ``gpu_ids`` maps each GPU index to its (pci, uuid); every listed GPU gets a verdict.
    """
    by_gpu: dict[str, list[Evidence]] = defaultdict(list)
    node_reasons: list[str] = []
    warnings: list[str] = []
    for item in evidence:
        if item.gpu is not None and item.gpu in gpu_ids:
            by_gpu[item.gpu].append(item)
        elif is_unhealthy(item):
            node_reasons.append(_reason(item))
        else:
            warnings.append(_reason(item))
    matched = {item.text for item in evidence}
    for reading in readings:  # NVML errors no rule explains are worth a look, not a failure
        if reading.metric == "nvml_error" and reading.text not in matched:
            warnings.append(f"unexplained NVML error: {reading.text}")
    gpus: list[GpuVerdict] = []
    for index, (pci, uuid) in sorted(gpu_ids.items(), key=lambda kv: int(kv[0])):
        items = sorted(by_gpu.get(index, []), key=lambda e: _ROLE_ORDER.get(e.role, 3))
        bad = [item for item in items if is_unhealthy(item)]
        warnings.extend(f"GPU {index}: {_reason(item)}" for item in items if not is_unhealthy(item))
        top = bad[0] if bad else None
        fault = top.fault_class if top is not None else None
        gpus.append(
            GpuVerdict(
                gpu=index,
                pci=pci,
                uuid=uuid,
                healthy=not bad,
                reasons=[_reason(item) for item in bad],
                fault_class=fault,
                action=DEFAULT_ACTION[fault] if fault is not None else None,
            )
        )
    unhealthy = [gpu for gpu in gpus if not gpu.healthy]
    status: VerdictStatus
    if unhealthy or node_reasons:
        names = ", ".join(f"GPU {gpu.gpu}" for gpu in unhealthy) or "node"
        status, message = "unhealthy", f"unhealthy: {names}"
    else:
        status, message = "healthy", f"healthy: {len(gpus)} GPUs"
    return NodeVerdict(
        node=node,
        status=status,
        message=message,
        gpus=gpus,
        node_reasons=node_reasons,
        warnings=warnings,
        readings=len(readings),
        checked_at=now,
    )


def run_check(
    node: str,
    *,
    nvml: NvmlApi | None,
    engine: LineScanner,
    now: Callable[[], datetime] = utcnow,
) -> NodeVerdict:
    """Open NVML, read every GPU once, classify, close; the node's verdict."""
    source = NvmlSource(nvml, now=now)
    status = source.open()
    try:
        if not status.available:
            return NodeVerdict(
                node=node,
                status="no_gpus",
                message=f"no GPUs: {status.reason}",
                checked_at=now(),
            )
        readings = source.poll()
        evidence = [item for r in readings for item in classify(engine, r, node=node)]
        ids = {str(gpu.index): (gpu.pci, gpu.uuid) for gpu in source.gpus}
        return verdict_from(node, readings, evidence, gpu_ids=ids, now=now())
    finally:
        source.close()


def format_verdict(verdict: NodeVerdict) -> str:
    """The human-readable form: a headline, then one line per GPU and per reason."""
    lines = [f"{verdict.node}: {verdict.message}"]
    for gpu in verdict.gpus:
        state = "ok" if gpu.healthy else f"UNHEALTHY {gpu.fault_class} -> {gpu.action}"
        lines.append(f"  GPU {gpu.gpu} ({gpu.pci}): {state}")
        lines.extend(f"    - {reason}" for reason in gpu.reasons)
    lines.extend(f"  node: {reason}" for reason in verdict.node_reasons)
    lines.extend(f"  warning: {warning}" for warning in verdict.warnings)
    return "\n".join(lines)
