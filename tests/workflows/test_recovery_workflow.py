"""RecoveryWorkflow on the real Temporal dev server, real activities, a fake scheduler."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    FaultClass,
    Interruption,
    JobInfo,
    JobState,
    NodeInfo,
    RecoveryOutcome,
)
from resurrect.testing import FakeScheduler
from sensors.report import report_interruption
from workers.recovery_worker import build_worker
from workflows.names import PHASE_QUERY
from workflows.recovery import RecoveryWorkflow

pytestmark = pytest.mark.temporal

HISTORIES = Path(__file__).parent.parent / "fixtures" / "histories"
OPT_IN = json.dumps({"resurrect": {"max_restarts": 2}})


def make_config(tmp_path: Path, **updates: object) -> ResurrectConfig:
    config = ResurrectConfig.model_validate(
        {
            "mode": "act",
            "cluster": {"name": f"t{uuid.uuid4().hex[:8]}"},
            "temporal": {"task_queue": f"q-{uuid.uuid4().hex}", "state_dir": str(tmp_path)},
            "recovery": {"wait_running_timeout_s": 20, "activity_timeout_s": 20},
        }
    )
    return config.model_copy(update=updates)


def job(
    job_id: str = "100",
    *,
    state: JobState = JobState.NODE_FAIL,
    nodes: tuple[str, ...] = ("node1", "node2"),
    comment: str = OPT_IN,
    stdout: Path | None = None,
    restart_count: int = 0,
) -> JobInfo:
    return JobInfo(
        job_id=job_id,
        name="train",
        state=state,
        user="alice",
        user_id=1000,
        nodes=list(nodes),
        num_nodes=len(nodes),
        comment=comment,
        restart_count=restart_count,
        stdout_path=str(stdout) if stdout else None,
    )


def interruption(config: ResurrectConfig, info: JobInfo, **extra: object) -> Interruption:
    data: dict[str, object] = {
        "cluster": config.cluster.name,
        "job_id": info.job_id,
        "restart_count": info.restart_count,
        "source": "test",
        "reason": f"job ended {info.state.value}",
        "observed_at": datetime.now(UTC),
        "job_state": info.state,
        "nodes": info.nodes,
    }
    data.update(extra)
    return Interruption.model_validate(data)


class Harness:
    def __init__(self, client: Client, config: ResurrectConfig, scheduler: FakeScheduler) -> None:
        self.client = client
        self.config = config
        self.scheduler = scheduler

    async def recover(self, report: Interruption) -> RecoveryOutcome:
        workflow_id = await report_interruption(
            self.client, report, task_queue=self.config.temporal.task_queue
        )
        handle = self.client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)
        result: RecoveryOutcome = await asyncio.wait_for(handle.result(), timeout=60)
        return result


@pytest_asyncio.fixture
async def harness(temporal_client: Client, tmp_path: Path) -> AsyncIterator[Harness]:
    config = make_config(tmp_path)
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    worker = build_worker(temporal_client, config, scheduler)
    async with worker:
        yield Harness(temporal_client, config, scheduler)


async def test_node_loss_drains_exactly_that_node_and_requeues(harness: Harness) -> None:
    s = harness.scheduler
    s.nodes["node2"] = s.nodes["node2"].model_copy(
        update={"state": "DOWN", "flags": ["NOT_RESPONDING"]}
    )
    s.jobs["100"] = job()
    outcome = await harness.recover(interruption(harness.config, s.jobs["100"]))
    assert outcome.recovered, outcome.notes
    assert outcome.fault_class is FaultClass.NODE_LOST
    assert outcome.drained_nodes == ["node2"]
    assert outcome.excluded_nodes == ["node2"]
    assert s.calls == [
        ("drain", "node2"),
        ("requeuehold", "100"),
        ("exclude", "100"),
        ("release", "100"),
    ]
    requeued = s.jobs["100"]
    assert requeued.job_id == "100" and requeued.user == "alice"
    assert requeued.state is JobState.RUNNING and "node2" not in requeued.nodes
    assert s.nodes["node2"].reason.startswith("resurrect:")


async def test_duplicate_reports_make_one_workflow(harness: Harness) -> None:
    s = harness.scheduler
    s.nodes["node1"] = s.nodes["node1"].model_copy(update={"state": "DOWN"})
    s.jobs["101"] = job("101", nodes=("node1", "node3"))
    report = interruption(harness.config, s.jobs["101"])
    ids = await asyncio.gather(
        *[
            report_interruption(
                harness.client,
                report.model_copy(update={"source": f"s{i}"}),
                task_queue=harness.config.temporal.task_queue,
            )
            for i in range(5)
        ]
    )
    assert len(set(ids)) == 1
    outcome = await harness.client.get_workflow_handle(ids[0], result_type=RecoveryOutcome).result()
    assert outcome.recovered
    assert s.calls.count(("requeuehold", "101")) == 1
    # a report after the recovery finished starts nothing new
    await report_interruption(harness.client, report, task_queue=harness.config.temporal.task_queue)
    count = await harness.client.count_workflows(f"WorkflowId = '{ids[0]}'")
    assert count.count == 1


async def test_observe_mode_changes_nothing_and_records_what_it_would_do(
    temporal_client: Client, tmp_path: Path
) -> None:
    config = make_config(tmp_path, mode="observe")
    s = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    s.nodes["node2"] = s.nodes["node2"].model_copy(update={"state": "DOWN"})
    s.jobs["102"] = job("102")
    before_nodes = dict(s.nodes)
    async with build_worker(temporal_client, config, s):
        outcome = await Harness(temporal_client, config, s).recover(
            interruption(config, s.jobs["102"])
        )
    assert outcome.outcome == "observed" and not outcome.recovered
    assert s.calls == []
    assert s.nodes == before_nodes and s.jobs["102"].state is JobState.NODE_FAIL
    assert any("would drain node2" in line for line in outcome.would_have)
    assert any("would requeue job 102" in line for line in outcome.would_have)


async def test_application_error_stops_and_notifies(harness: Harness, tmp_path: Path) -> None:
    log = tmp_path / "slurm-103.out"
    log.write_text(
        "[rank0]: step 10 loss 1.0\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    main()\n"
        "ValueError: expected a tensor of shape (4, 8), got (4, 9)\n"
    )
    s = harness.scheduler
    s.jobs["103"] = job("103", state=JobState.FAILED, stdout=log)
    outcome = await harness.recover(interruption(harness.config, s.jobs["103"]))
    assert outcome.fault_class is FaultClass.APP_ERROR
    assert outcome.outcome == "stopped" and not outcome.requeued
    assert s.calls == []
    notes = (tmp_path / "notifications.jsonl").read_text().splitlines()
    assert json.loads(notes[-1])["job_id"] == "103"


async def test_scheduler_down_during_recovery_is_retried(harness: Harness) -> None:
    s = harness.scheduler
    s.nodes["node1"] = s.nodes["node1"].model_copy(update={"state": "DOWN"})
    s.jobs["104"] = job("104")
    s.fail_next = 3  # the controller is unreachable for the first three calls
    outcome = await harness.recover(interruption(harness.config, s.jobs["104"]))
    assert outcome.recovered
    assert s.fail_next == 0
    assert s.calls == [
        ("drain", "node1"),
        ("requeuehold", "104"),
        ("exclude", "104"),
        ("release", "104"),
    ]


async def test_malformed_comment_is_noted_and_default_policy_applies(harness: Harness) -> None:
    s = harness.scheduler
    s.nodes["node2"] = s.nodes["node2"].model_copy(update={"state": "DOWN"})
    s.jobs["105"] = job("105", comment='{"resurrect": {"max_restarts": "many"')
    outcome = await harness.recover(interruption(harness.config, s.jobs["105"]))
    assert outcome.recovered
    assert any("malformed resurrect comment" in note for note in outcome.notes)


async def test_unknown_job_ends_with_a_clear_outcome(harness: Harness) -> None:
    info = job("999")
    outcome = await harness.recover(interruption(harness.config, info))
    assert outcome.outcome == "job_unknown"
    assert any("job 999 not known" in note for note in outcome.notes)


async def test_restart_budget_counts_only_charged_restarts(harness: Harness) -> None:
    s = harness.scheduler
    crash_log = Path(harness.config.temporal.state_dir) / "crash.out"
    crash_log.write_text("srun: error: node1: task 0: Segmentation fault (core dumped)\n")
    outcomes = []
    for attempt in range(3):
        s.jobs["106"] = job(
            "106",
            state=JobState.FAILED,
            stdout=crash_log,
            restart_count=attempt,
            comment=json.dumps({"resurrect": {"max_restarts": 2}}),
        )
        outcomes.append(await harness.recover(interruption(harness.config, s.jobs["106"])))
        await asyncio.sleep(1.5)  # visibility of the finished recovery
    assert [o.outcome for o in outcomes] == ["recovered", "recovered", "stopped"]
    assert any("restart budget spent" in note for note in outcomes[2].notes)


async def test_phase_query_and_search_attributes(harness: Harness) -> None:
    s = harness.scheduler
    s.nodes["node2"] = s.nodes["node2"].model_copy(update={"state": "DOWN"})
    s.jobs["107"] = job("107")
    report = interruption(harness.config, s.jobs["107"])
    outcome = await harness.recover(report)
    handle = harness.client.get_workflow_handle(outcome.workflow_id)
    assert await handle.query(PHASE_QUERY) == "done"
    await asyncio.sleep(1.5)
    query = (
        f"ResurrectJobId = '107' AND ResurrectCluster = '{harness.config.cluster.name}'"
        " AND ResurrectFaultClass = 'node.lost' AND ResurrectOutcome = 'recovered'"
        " AND ResurrectNodes = 'node2'"
    )
    assert (await harness.client.count_workflows(query)).count == 1


async def test_histories_replay_without_nondeterminism(harness: Harness, tmp_path: Path) -> None:
    """Replay fresh histories of three kinds of recovery, and every stored one.

    Stored histories (tests/fixtures/histories) guard workflow changes: a change that
    breaks replay of a recorded recovery would break recoveries in flight during an
    upgrade. RESURRECT_RECORD_HISTORIES=1 rewrites them from this run.
    """
    s = harness.scheduler
    s.nodes["node3"] = s.nodes["node3"].model_copy(update={"state": "DOWN"})
    s.jobs["108"] = job("108", nodes=("node3", "node4"))
    log = tmp_path / "app.out"
    log.write_text("Traceback (most recent call last):\nKeyError: 'labels'\n")
    s.jobs["109"] = job("109", state=JobState.FAILED, stdout=log)
    s.jobs["110"] = job("110", comment=json.dumps({"resurrect": {"mode": "observe"}}))
    fresh = {}
    for name, job_id in (("node-loss", "108"), ("app-error-stop", "109"), ("observe", "110")):
        outcome = await harness.recover(interruption(harness.config, s.jobs[job_id]))
        handle = harness.client.get_workflow_handle(outcome.workflow_id)
        fresh[name] = await handle.fetch_history()
    if os.environ.get("RESURRECT_RECORD_HISTORIES"):
        HISTORIES.mkdir(parents=True, exist_ok=True)
        for name, history in fresh.items():
            (HISTORIES / f"{name}.json").write_text(history.to_json())
    stored = [
        WorkflowHistory.from_json(path.stem, path.read_text())
        for path in sorted(HISTORIES.glob("*.json"))
    ]
    assert len(stored) >= 3, "stored histories missing from tests/fixtures/histories"
    replayer = Replayer(workflows=[RecoveryWorkflow], data_converter=harness.client.data_converter)
    for history in [*fresh.values(), *stored]:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, (history.workflow_id, result.replay_failure)


__all__ = ["NodeInfo"]


async def test_a_hung_running_job_is_cancelled_and_restarted(harness: Harness) -> None:
    s = harness.scheduler
    s.jobs["111"] = job("111", state=JobState.RUNNING, restart_count=0)
    report = interruption(
        harness.config,
        s.jobs["111"],
        source="log_tail",
        reason="no output and no checkpoint activity for 901 s",
        fault_hint=FaultClass.JOB_HANG,
    )
    outcome = await harness.recover(report)
    assert outcome.fault_class is FaultClass.JOB_HANG and outcome.recovered, outcome.notes
    assert outcome.drained_nodes == [] and s.calls == [("requeuehold", "111"), ("release", "111")]
