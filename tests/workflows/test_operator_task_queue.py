"""``temporal.operator_task_queue`` (default ``<task_queue>-operator``): the node-repair
workflows run on a task queue with a worker of their own, the drain budget on one of its own
beside it (``<task_queue>-operator-budget``), and the recoveries drain and requeue in local
activities (a burst of them cannot hold every workflow-task slot the budget workflow waits
for); named as ``task_queue`` itself, everything shares one."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

from support.builders import interruption, job, make_config
from support.histories import keep
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from resurrect.contracts import RecoveryOutcome
from resurrect.contracts.workflow_ids import drain_budget_workflow_id, node_repair_workflow_id
from resurrect.sensors.report import report_interruption
from resurrect.temporal.history import activities_run
from resurrect.testing import FakeScheduler
from resurrect.workers.recovery_worker import (
    build_budget_worker,
    build_operator_worker,
    build_operator_workers,
    build_worker,
    served_task_queues,
)

RECOVERY = {"wait_running_timeout_s": 20, "activity_timeout_s": 20}


async def test_by_default_the_operator_queue_is_its_own_and_drain_and_requeue_are_local(
    temporal_client: Client, tmp_path: Path
) -> None:
    queue = f"q-{uuid.uuid4().hex}"
    temporal = {"task_queue": queue}  # operator_task_queue: the default
    config = make_config(tmp_path, mode="act", recovery=RECOVERY, temporal=temporal)
    s = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    s.nodes["node2"] = s.nodes["node2"].model_copy(
        update={"state": "DOWN", "flags": ["NOT_RESPONDING"]}
    )
    s.jobs["100"] = job()
    operators = build_operator_workers(temporal_client, config, s)
    assert [w.task_queue for w in operators] == [f"{queue}-operator", f"{queue}-operator-budget"]
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(build_worker(temporal_client, config, s))
        for operator in operators:
            await stack.enter_async_context(operator)
        workflow_id = await report_interruption(
            temporal_client, interruption(config.cluster.name, s.jobs["100"]), task_queue=queue
        )
        handle = temporal_client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)
        outcome = await asyncio.wait_for(handle.result(), timeout=60)
        history = await handle.fetch_history()
        keep(
            "node-loss-local-drain-nr-read-twice", history
        )  # replayed by tests/workflows/test_replay.py
        budget = await temporal_client.get_workflow_handle(
            drain_budget_workflow_id(config.cluster.name)
        ).describe()
        repair = await temporal_client.get_workflow_handle(
            node_repair_workflow_id(config.cluster.name, "node2")
        ).describe()
    assert outcome.recovered, outcome.notes
    assert outcome.drained_nodes == ["node2"]
    assert s.calls == [
        ("drain", "node2"),
        ("requeuehold", "100"),
        ("exclude", "100"),
        ("release", "100"),
    ]
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    # every call a first attempt as a local activity that was enough: one workflow task
    assert scheduled == []
    assert activities_run(history) == [
        "recovery.gather_evidence",
        "recovery.assess",
        "recovery.drain_nodes",
        "recovery.verify_checkpoint",
        "recovery.requeue_job",
        "recovery.wait_running",
    ]
    completed = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]
    assert len(completed) == 1
    assert repair.task_queue == f"{queue}-operator"
    assert budget.task_queue == f"{queue}-operator-budget"


def test_an_operator_queue_named_as_the_task_queue_shares_it_without_an_operator_worker(
    tmp_path: Path,
) -> None:
    queue = f"q-{uuid.uuid4().hex}"
    temporal = {"task_queue": queue, "operator_task_queue": queue}
    config = make_config(tmp_path, mode="act", temporal=temporal)
    s = FakeScheduler.with_nodes(1)
    assert build_operator_worker(None, config, s) is None  # type: ignore[arg-type]
    assert build_budget_worker(None, config, s) is None  # type: ignore[arg-type]
    assert served_task_queues(config) == [queue]


def test_a_worker_process_serves_the_recoveries_the_repair_and_the_budget_queues(
    tmp_path: Path,
) -> None:
    """What the release check (another release's pollers) and the operators watch."""
    queue = f"q-{uuid.uuid4().hex}"
    config = make_config(tmp_path, temporal={"task_queue": queue})
    assert served_task_queues(config) == [queue, f"{queue}-operator", f"{queue}-operator-budget"]


async def test_workflows_run_in_the_sandbox_unless_it_is_turned_off(
    temporal_client: Client, tmp_path: Path
) -> None:
    default = make_config(tmp_path)
    off = make_config(tmp_path, temporal={"workflow_sandbox": False})
    s = FakeScheduler.with_nodes(1)
    for config, runner in ((default, SandboxedWorkflowRunner), (off, UnsandboxedWorkflowRunner)):
        workers = (
            build_worker(temporal_client, config, s),
            *build_operator_workers(temporal_client, config, s),
        )
        for worker in workers:
            assert worker is not None
            assert isinstance(worker.config()["workflow_runner"], runner)
