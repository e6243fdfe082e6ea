"""Recovery plans with plugin steps, run by RecoveryWorkflow on the real Temporal server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import support.recovery
from support import test_plugins
from support.builders import OPT_IN, interruption, job, make_config
from support.test_plugins import PLUGIN
from support.workers import resurrect_workers
from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import RecoveryOutcome
from resurrect.errors import PlanError
from resurrect.temporal.history import activities_run
from resurrect.testing import FakeScheduler
from resurrect.workers.recovery_worker import build_worker

pytestmark = pytest.mark.temporal


def setup(
    tmp_path: Path, plan_yaml: str, mode: str = "act"
) -> tuple[ResurrectConfig, FakeScheduler]:
    plan_file = tmp_path / "plans.yaml"
    plan_file.write_text(plan_yaml)
    config = make_config(
        tmp_path,
        mode=mode,
        plans={"paths": [str(plan_file)]},
        recovery={"wait_running_timeout_s": 20},
    )
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    scheduler.nodes["node2"] = scheduler.nodes["node2"].model_copy(update={"state": "DOWN"})
    scheduler.jobs["7"] = job("7", comment=OPT_IN)
    return config, scheduler


async def recover(
    client: Client, config: ResurrectConfig, scheduler: FakeScheduler
) -> RecoveryOutcome:
    """Job 7's node2 failed: the recovery, with the test plugin's steps registered."""
    async with resurrect_workers(client, config, scheduler, plugins=[PLUGIN]):
        return await support.recovery.recover(
            client, config, interruption(config.cluster.name, scheduler.jobs["7"])
        )


async def activity_types(client: Client, workflow_id: str) -> list[str]:
    """The steps the recovery ran: activity tasks and local activities (quick steps)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return activities_run(history)


PLAN = """
plans:
  - name: with-plugin
    when: {fault_classes: [node.lost]}
    steps:
      - activity: testkit.flaky
        params: {failures: 2}
        retry: {max_attempts: 5, initial_interval_s: 0.2}
      - activity: recovery.drain_nodes
      - activity: {second}
        {second_options}
      - activity: recovery.requeue_job
      - activity: recovery.wait_running
"""


def plan(second: str, options: str = "") -> str:
    return PLAN.replace("{second}", second).replace("{second_options}", options)


async def test_plugin_steps_run_and_appear_in_history_under_namespaced_names(
    temporal_client: Client, tmp_path: Path
) -> None:
    config, scheduler = setup(tmp_path, plan("testkit.mutate"))
    outcome = await recover(temporal_client, config, scheduler)
    assert outcome.recovered, outcome.notes
    types = await activity_types(temporal_client, outcome.workflow_id)
    assert types.count("testkit.flaky") == 1  # one scheduled activity, retried inside Temporal
    assert "testkit.mutate" in types and types.index("testkit.mutate") > types.index(
        "recovery.drain_nodes"
    )
    assert any(
        "testkit.flaky: succeeded on attempt 3" in n for n in outcome.notes
    )  # transient retried
    assert outcome.workflow_id in test_plugins.MUTATIONS


async def test_observe_mode_mutating_plugin_step_records_and_does_nothing(
    temporal_client: Client, tmp_path: Path
) -> None:
    config, scheduler = setup(tmp_path, plan("testkit.mutate"), mode="observe")
    outcome = await recover(temporal_client, config, scheduler)
    assert outcome.outcome == "observed"
    assert outcome.workflow_id not in test_plugins.MUTATIONS
    assert "would run testkit.mutate()" in outcome.would_have
    assert scheduler.calls == []


async def test_permanent_error_stops_the_plan(temporal_client: Client, tmp_path: Path) -> None:
    config, scheduler = setup(tmp_path, plan("testkit.broken"))
    outcome = await recover(temporal_client, config, scheduler)
    assert outcome.outcome == "failed" and not outcome.requeued
    assert any("this remedy cannot work here" in n for n in outcome.notes)
    assert scheduler.calls == [("drain", "node2")]  # the steps after it did not run


async def test_permanent_error_can_continue(temporal_client: Client, tmp_path: Path) -> None:
    config, scheduler = setup(tmp_path, plan("testkit.broken", "on_failure: continue"))
    outcome = await recover(temporal_client, config, scheduler)
    assert outcome.recovered and ("requeuehold", "7") in scheduler.calls


async def test_hanging_step_is_cut_by_its_heartbeat_timeout(
    temporal_client: Client, tmp_path: Path
) -> None:
    options = "heartbeat_s: 1\n        timeout_s: 600\n        retry: {max_attempts: 1}\n        on_failure: continue"
    config, scheduler = setup(tmp_path, plan("testkit.hang", options))
    started = asyncio.get_running_loop().time()
    outcome = await recover(temporal_client, config, scheduler)
    assert asyncio.get_running_loop().time() - started < 60
    assert any("testkit.hang failed" in n and "eartbeat" in n for n in outcome.notes), outcome.notes
    assert outcome.recovered


async def test_plan_naming_an_unregistered_activity_is_rejected_at_start(
    temporal_client: Client, tmp_path: Path
) -> None:
    config, scheduler = setup(tmp_path, plan("bmc.reset_gpu"))
    with pytest.raises(PlanError, match=r"no worker registers activity 'bmc\.reset_gpu'"):
        build_worker(temporal_client, config, scheduler, plugins=[PLUGIN])
