"""Where the agent sends heartbeats and findings: Temporal (production) or a stream (smoke)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Protocol, TextIO

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from resurrect.config import AgentSettings
from resurrect.contracts.node_health import (
    AGENT_STOPPED_SIGNAL,
    FINDINGS_SIGNAL,
    HEARTBEAT_SIGNAL,
    NODE_HEALTH_WORKFLOW,
    AgentStopped,
    NodeFindings,
    NodeHealthInput,
    NodeHeartbeat,
)
from resurrect.contracts.workflow_ids import node_health_workflow_id
from resurrect.errors import ResurrectError

log = logging.getLogger(__name__)


class DeliveryError(ResurrectError):
    """Findings could not be delivered now; the agent keeps them and sends them again."""


class AgentReporter(Protocol):
    """The agent's one way out.

    ``heartbeat`` and ``stopped`` never raise (a lost heartbeat is replaced by the next);
    ``findings`` raises :class:`DeliveryError` when they were not delivered.
    """

    async def heartbeat(self, beat: NodeHeartbeat) -> None: ...

    async def findings(self, findings: NodeFindings) -> None: ...

    async def stopped(self, stopped: AgentStopped) -> None: ...


class TemporalReporter:
    """Signal-with-start of the node's ``NodeHealthWorkflow`` (id ``node-health/<cluster>/<node>``).

    Every send starts the workflow if it is not running, so the first heartbeat after a
    control-plane restart (or after the workflow was terminated) brings it back.
    Errors are logged and swallowed: the agent keeps watching while Temporal is away.
    """

    def __init__(
        self, client: Client, *, cluster: str, task_queue: str, settings: AgentSettings
    ) -> None:
        self._client = client
        self._task_queue = task_queue
        self._input = NodeHealthInput(
            cluster=cluster,
            node=settings.node_name,
            silence_threshold_s=settings.silence_threshold_s,
            report_dedup_s=settings.dedup_window_s,
            max_signals_per_run=settings.max_signals_per_run,
        )
        self.workflow_id = node_health_workflow_id(cluster, settings.node_name)
        self.failures = 0
        # when (time.monotonic) the newest heartbeat Temporal took was sent: the lease
        self.confirmed_at: float | None = None

    async def _send(self, signal: str, payload: object) -> bool:
        try:
            await self._client.start_workflow(
                NODE_HEALTH_WORKFLOW,
                self._input,
                id=self.workflow_id,
                task_queue=self._task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                start_signal=signal,
                start_signal_args=[payload],
            )
        except (RPCError, RuntimeError, OSError) as exc:
            self.failures += 1
            log.warning("%s: %s signal not delivered: %s", self.workflow_id, signal, exc)
            return False
        return True

    async def heartbeat(self, beat: NodeHeartbeat) -> None:
        sent = time.monotonic()
        if await self._send(HEARTBEAT_SIGNAL, beat):
            self.confirmed_at = max(self.confirmed_at or sent, sent)

    async def findings(self, findings: NodeFindings) -> None:
        if not await self._send(FINDINGS_SIGNAL, findings):
            raise DeliveryError(f"{self.workflow_id}: findings not delivered")

    async def stopped(self, stopped: AgentStopped) -> None:
        await self._send(AGENT_STOPPED_SIGNAL, stopped)


class PrintReporter:
    """Writes findings (and, if asked, heartbeats) to a stream: one JSON object per line."""

    def __init__(self, stream: TextIO | None = None, *, heartbeats: bool = False) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._heartbeats = heartbeats
        self.sent: list[NodeHeartbeat | NodeFindings | AgentStopped] = []

    def _write(self, kind: str, payload: NodeHeartbeat | NodeFindings | AgentStopped) -> None:
        self.sent.append(payload)
        record = {"type": kind, **payload.model_dump(mode="json", exclude_defaults=True)}
        self._stream.write(json.dumps(record, sort_keys=True) + "\n")
        self._stream.flush()

    async def heartbeat(self, beat: NodeHeartbeat) -> None:
        if self._heartbeats:
            self._write(HEARTBEAT_SIGNAL, beat)
        else:
            self.sent.append(beat)

    async def findings(self, findings: NodeFindings) -> None:
        self._write(FINDINGS_SIGNAL, findings)

    async def stopped(self, stopped: AgentStopped) -> None:
        self._write(AGENT_STOPPED_SIGNAL, stopped)
