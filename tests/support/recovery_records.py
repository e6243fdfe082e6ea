"""Recovery records as recoveries leave them in Temporal's visibility (workflow id, search
attributes, the report as input), made without running a recovery: workflows started on a
task queue no worker polls, on a cluster name of their own. For tests of what reads a job's
earlier recoveries (the restart budget, loop counts, checkpoint advice)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import timedelta

from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.contracts.workflow_names import RECOVERY_WORKFLOW
from resurrect.job_incarnation import Incarnation
from resurrect.temporal import search_attributes as sa
from support.builders import interruption, job


class Records:
    """Recovery records of one cluster (a fresh name), made with ``client``."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.cluster = f"t{uuid.uuid4().hex[:8]}"
        self.queue = f"nobody-{uuid.uuid4().hex}"
        self.made = 0

    async def add(
        self,
        job_id: str,
        restart: int,
        incarnation: Incarnation | None,
        *,
        charged: bool = True,
        outcome: str = "recovered",
        fault_class: str | None = None,
        nodes: Sequence[str] = (),
    ) -> str:
        """A record of the recovery of attempt ``restart`` of ``job_id`` naming
        ``incarnation`` (None: none, as before records named one), with the fault class and
        nodes its recovery recorded (none by default); returns its id."""
        pairs: list[SearchAttributePair[object]] = [
            SearchAttributePair(sa.JOB_ID, job_id),
            SearchAttributePair(sa.CLUSTER, self.cluster),
            SearchAttributePair(sa.OUTCOME, outcome),
        ]
        if fault_class is not None:
            pairs.append(SearchAttributePair(sa.FAULT_CLASS, fault_class))
        if nodes:
            pairs.append(SearchAttributePair(sa.NODES, list(nodes)))
        if charged:
            pairs.append(SearchAttributePair(sa.BUDGET_CHARGED, True))
        if incarnation is not None:
            pairs.append(SearchAttributePair(sa.INCARNATION, incarnation.key))
        workflow_id = recovery_workflow_id(self.cluster, job_id, restart)
        await self.client.start_workflow(
            RECOVERY_WORKFLOW,
            interruption(self.cluster, job(job_id, restart_count=restart)),
            id=workflow_id,
            task_queue=self.queue,
            search_attributes=TypedSearchAttributes(pairs),
            execution_timeout=timedelta(minutes=5),
        )
        self.made += 1
        return workflow_id

    async def visible(self) -> None:
        """Once the server's visibility shows every record made."""
        query = f"ResurrectCluster = '{self.cluster}'"
        for _ in range(200):
            if (await self.client.count_workflows(query)).count == self.made:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{self.made} records never all visible")

    async def remove(self) -> None:
        query = f"ResurrectCluster = '{self.cluster}' AND ExecutionStatus = 'Running'"
        async for found in self.client.list_workflows(query):
            await self.client.get_workflow_handle(found.id).terminate("test over")
