"""Liveness changes into the node health workflows: one signal-with-start per change."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from resurrect.carry_over import carry_over
from resurrect.contracts.node_health import (
    HEARTBEAT_SIGNAL,
    NODE_HEALTH_WORKFLOW,
    NODE_SILENT_SIGNAL,
    NodeHealthInput,
    NodeHeartbeat,
    NodeSilent,
)
from resurrect.contracts.workflow_ids import node_health_workflow_id
from resurrect.sensors.liveness.collector import LivenessChange


def change_signal(change: LivenessChange) -> tuple[str, NodeHeartbeat | NodeSilent]:
    """The signal (name, payload) that tells a node health workflow about ``change``."""
    beat = change.beat
    if change.kind == "silent":
        return NODE_SILENT_SIGNAL, NodeSilent(
            node=beat.node,
            last_heartbeat_at=change.last_heard_at,
            last_seq=beat.seq,
            silent_for_s=change.silent_for_s,
            silence_threshold_s=beat.silence_threshold_s,
        )
    return HEARTBEAT_SIGNAL, carry_over(beat, NodeHeartbeat, watched_by_collector=True)


class TemporalForwarder:
    """Signal-with-start of ``node-health/<cluster>/<node>`` for each change (one action)."""

    def __init__(self, client: Client, *, cluster: str, task_queue: str) -> None:
        self._client = client
        self._cluster = cluster
        self._task_queue = task_queue
        self.sent = 0

    async def __call__(self, change: LivenessChange) -> None:
        name, payload = change_signal(change)
        beat = change.beat
        await self._client.start_workflow(
            NODE_HEALTH_WORKFLOW,
            NodeHealthInput(
                cluster=self._cluster,
                node=beat.node,
                silence_threshold_s=beat.silence_threshold_s,
            ),
            id=node_health_workflow_id(self._cluster, beat.node),
            task_queue=self._task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=name,
            start_signal_args=[payload],
        )
        self.sent += 1
