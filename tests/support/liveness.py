"""Heartbeats as a node agent sends them to the liveness collector, for the collector's tests."""

from __future__ import annotations

from datetime import UTC, datetime

from resurrect.sensors.liveness.wire import Beat

CLUSTER = "c"
# When every heartbeat is sent and the collector reads it (no clock skew between them).
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def beat(node: str = "n1", seq: int = 0, *, instance: str = "a", **extra: object) -> Beat:
    """Heartbeat ``seq`` of agent ``instance`` on ``node`` of cluster ``c``, sent at ``NOW``
    with a 6 s silence threshold; ``extra`` overrides or adds fields."""
    values: dict[str, object] = {
        "cluster": CLUSTER,
        "node": node,
        "instance": instance,
        "seq": seq,
        "sent_at": NOW,
        "silence_threshold_s": 6.0,
    }
    values.update(extra)
    return Beat.model_validate(values)
