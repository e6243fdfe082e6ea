"""One-call recorders for the hooks in sensors and the scheduler client (labels decided here,
so each hook stays one line in the code it measures)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from resurrect.contracts import Interruption, NodeInfo
from resurrect.telemetry import metrics as m

DRAIN_REASON_PREFIX = "resurrect:"  # resurrect.scheduler.base (not imported: no cycle)


def record_command(program: str, seconds: float, output_bytes: int) -> None:
    """A Slurm client command ran (``squeue``, ``sinfo``, ``scontrol`` ...)."""
    labels = {"command": os.path.basename(program)}
    m.SCHEDULER_COMMAND.record(seconds, labels)
    m.SCHEDULER_BYTES.add(output_bytes, labels)


def record_watcher_poll(seconds: float, ok: bool) -> None:
    m.WATCHER_POLL.record(seconds, {"result": "ok" if ok else "error"})


def record_follower_read(read_bytes: int, lag_s: float) -> None:
    """The log follower read ``read_bytes`` new bytes, ``lag_s`` after the file's last write."""
    m.FOLLOWER_BYTES.add(read_bytes)
    m.FOLLOWER_LAG.record(max(0.0, lag_s))


def record_heartbeat(ok: bool) -> None:
    m.AGENT_HEARTBEATS.add(1, {"result": "ok" if ok else "error"})


def record_readings(count: int, kind: str) -> None:
    if count:
        m.AGENT_READINGS.add(count, {"kind": kind})


def record_report(source: str, lag_s: float) -> None:
    """A sensor's report reached Temporal ``lag_s`` after it observed the fault."""
    m.REPORTS.add(1, {"source": source})
    m.SENSOR_LAG.record(max(0.0, lag_s), {"source": source})


MAX_UNKNOWN_SHAPES = 100
"""Distinct shapes the unknown metric labels per process; later new ones count as ``other``
(the wording comes from job output, so its label values must stay a bounded set)."""
_UNKNOWN_SHAPES: set[str] = set()


def record_unknown_diagnosis(cluster: str, shape: str) -> None:
    """A diagnosis of ``unknown``, counted by the shape of its first fatal-looking line
    (:func:`resurrect.rules.unrecognised.unknown_shape`), so operators see which wordings to
    teach next."""
    if shape not in _UNKNOWN_SHAPES:
        if len(_UNKNOWN_SHAPES) >= MAX_UNKNOWN_SHAPES:
            shape = "other"
        else:
            _UNKNOWN_SHAPES.add(shape)
    m.UNKNOWN_DIAGNOSES.add(1, {"cluster": cluster, "shape": shape})


def record_node_returned(cluster: str) -> None:
    m.NODES_RETURNED.add(1, {"cluster": cluster})


_DRAINED_BY_US: dict[str, set[str]] = {}


def track_drained_nodes(cluster: str, nodes: Iterable[NodeInfo]) -> None:
    """From one watcher poll: nodes drained by resurrect now, and those returned to service
    since the last poll (resumed by an operator or a health check)."""
    now = {n.name for n in nodes if n.drained and n.reason.startswith(DRAIN_REASON_PREFIX)}
    before = _DRAINED_BY_US.get(cluster)
    _DRAINED_BY_US[cluster] = now
    m.NODES_DRAINED_NOW.set(len(now), {"cluster": cluster})
    # adding 0 keeps the series exported from the first poll on, whichever meter provider
    # is current (a process may set up telemetry again, e.g. in tests)
    m.NODES_RETURNED.add(0, {"cluster": cluster})
    for _ in (before or set()) - now:
        record_node_returned(cluster)


def earliest_evidence(interruption: Interruption) -> float:
    """The earliest time (UNIX seconds) a sensor saw this fault: its first evidence."""
    times = [interruption.observed_at.timestamp()]
    times.extend(e.observed_at.timestamp() for e in interruption.evidence if e.observed_at)
    return min(times)
