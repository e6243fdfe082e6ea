"""Readings through the rule engine: the same packs that read job logs read the GPUs."""

from __future__ import annotations

from resurrect.contracts import Evidence
from resurrect.rules.engine import LineScanner
from resurrect.sensors.node_agent.models import Reading


def classify(engine: LineScanner, reading: Reading, *, node: str) -> list[Evidence]:
    """The evidence one reading produces, tagged with the node, GPU and time it was seen."""
    found = engine.scan_line(reading.text, kind=reading.kind, host=node, file=reading.source)
    if not found:
        return []
    extra = {"metric": reading.metric, "source": reading.source}
    if reading.pci:
        extra["pci"] = reading.pci
    if reading.uuid:
        extra["uuid"] = reading.uuid
    return [
        evidence.model_copy(
            update={
                "host": node,
                "gpu": reading.gpu if reading.gpu is not None else evidence.gpu,
                "observed_at": reading.observed_at,
                "fields": {**evidence.fields, **extra},
            }
        )
        for evidence in found
    ]
