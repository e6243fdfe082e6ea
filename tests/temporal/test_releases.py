"""One release serves a task queue at a time (resurrect/temporal/releases.py), on the real
dev server. tests/workflows/test_rolling_upgrade.py runs it with a worker of 0.2.0."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from resurrect import __version__
from resurrect.errors import OtherReleaseServing
from resurrect.temporal.releases import (
    refuse_other_releases,
    release_of,
    watch_other_releases,
    worker_identity,
)

pytestmark = pytest.mark.temporal


@workflow.defn(name="ReleaseCheckProbe")
class Probe:
    @workflow.run
    async def run(self) -> str:
        return "done"


def test_a_worker_names_its_release_and_older_ones_name_none() -> None:
    assert release_of(worker_identity()) == __version__
    assert release_of(worker_identity("0.3.0")) == "0.3.0"
    assert release_of("4711@ctl1") is None  # resurrect 0.2.0's workers
    assert release_of("resurrect-@ctl1") is None


async def test_a_live_worker_of_another_release_is_refused_a_stopped_one_is_not(
    temporal_client: Client,
) -> None:
    queue = f"q-{uuid.uuid4().hex}"
    await refuse_other_releases(temporal_client, [queue], window_s=5)  # nobody polls it
    old = Worker(
        temporal_client,
        task_queue=queue,
        workflows=[Probe],
        identity="4711@ctl1",  # as 0.2.0 polls
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    # a worker of this release, as another process would run it (a client of its own)
    other_process = await Client.connect(
        temporal_client.service_client.config.target_host, namespace=temporal_client.namespace
    )
    same = Worker(
        other_process,
        task_queue=queue,
        workflows=[Probe],
        identity=worker_identity(),
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    async with same:
        await asyncio.sleep(0.5)
        await refuse_other_releases(temporal_client, [queue], window_s=5)  # our own release
    async with old:
        await asyncio.sleep(1.0)  # it polls
        checking = asyncio.create_task(
            refuse_other_releases(temporal_client, [queue], window_s=120, interval_s=0.2)
        )
        await asyncio.sleep(0.5)
        assert not checking.done()  # watching it
        # a task makes the idle worker poll again before the server's minute is up
        await temporal_client.execute_workflow(Probe.run, id=queue, task_queue=queue)
        with pytest.raises(OtherReleaseServing, match=r"a release before 0\.2\.1 \(4711@ctl1\)"):
            await asyncio.wait_for(checking, timeout=60)
    # stopped: its last poll ages out of the window, and the check lets a worker start
    await asyncio.wait_for(
        refuse_other_releases(temporal_client, [queue], window_s=3, interval_s=0.2), timeout=30
    )


async def test_a_worker_of_another_release_started_later_is_reported_while_running(
    temporal_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """A release before 0.2.1 starts without looking: the running worker's watch sees it."""
    queue = f"q-{uuid.uuid4().hex}"
    stop = asyncio.Event()
    watching = asyncio.create_task(
        watch_other_releases(temporal_client, [queue], window_s=120, stop=stop, interval_s=0.2)
    )
    old = Worker(
        temporal_client,
        task_queue=queue,
        workflows=[Probe],
        identity="4711@ctl1",  # as 0.2.0 polls
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    with caplog.at_level(logging.ERROR, logger="resurrect.temporal.releases"):
        async with old:
            await asyncio.sleep(1.0)  # it polls, and is seen
            # a task makes it poll again: alive
            await temporal_client.execute_workflow(Probe.run, id=queue, task_queue=queue)
            deadline = asyncio.get_running_loop().time() + 30
            while not any("4711@ctl1" in r.getMessage() for r in caplog.records):
                assert asyncio.get_running_loop().time() < deadline, "not reported"
                await asyncio.sleep(0.1)
            await temporal_client.execute_workflow(Probe.run, id=f"{queue}-2", task_queue=queue)
            await asyncio.sleep(0.6)
    stop.set()
    await asyncio.wait_for(watching, timeout=5)
    reports = [r.getMessage() for r in caplog.records if "4711@ctl1" in r.getMessage()]
    assert len(reports) == 1, reports  # once, however long it stays
    assert "a release before 0.2.1" in reports[0] and "docs/upgrading.md" in reports[0]
