"""How a sensor's report reaches Temporal: the service's bound reporter starts the job
attempt's recovery on the recoveries' task queue, searchable by the job from the start."""

from __future__ import annotations

import uuid

import pytest
from support.builders import interruption, job
from temporalio.client import Client

from resurrect.contracts import JobState
from resurrect.sensors.report import reporter
from resurrect.temporal import search_attributes as sa

pytestmark = pytest.mark.temporal


async def test_the_bound_reporter_starts_the_attempts_recovery_on_the_task_queue(
    temporal_client: Client,
) -> None:
    task_queue = f"no-worker-{uuid.uuid4().hex[:8]}"  # nothing runs it: only the start is read
    cluster = f"c{uuid.uuid4().hex[:8]}"
    report = reporter(temporal_client, task_queue=task_queue)
    lost = interruption(cluster, job("41", state=JobState.NODE_FAIL, nodes=("node1", "node2")))
    workflow_id = await report(lost)
    handle = temporal_client.get_workflow_handle(workflow_id)
    try:
        assert workflow_id == lost.workflow_id
        description = await handle.describe()
        assert description.task_queue == task_queue
        attributes = description.typed_search_attributes
        assert attributes.get(sa.JOB_ID) == "41" and attributes.get(sa.CLUSTER) == cluster
        assert attributes.get(sa.NODES) == ["node1", "node2"]
    finally:
        await handle.terminate("test over")
