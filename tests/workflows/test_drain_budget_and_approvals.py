"""The circuit breaker and approvals on the real Temporal dev server, with real activities
and workflows, an in-memory scheduler and two workers sharing one task queue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import pytest
import pytest_asyncio
from support.histories import commands, keep
from support.operator_control import (
    ConfigFor,
    awaiting,
    drained_by_us,
    lost_node_jobs,
    notifications,
    operator_keys,
    result,
    start,
    until,
    workers,
)
from temporalio.client import Client
from temporalio.worker import Replayer

from resurrect.config import ResurrectConfig
from resurrect.contracts import NodeInfo
from resurrect.contracts.recovery_status import RecoveryWorkflowStatus
from resurrect.contracts.workflow_names import STATUS_QUERY, Activity
from resurrect.errors import ResurrectError
from resurrect.operator.budget import view
from resurrect.operator.budget_client import budget_state
from resurrect.operator.cli import decide_approval
from resurrect.testing import FakeScheduler
from resurrect.workflows.recovery import RecoveryWorkflow

pytestmark = pytest.mark.temporal


async def replays(client: Client, workflow_id: str, name: str) -> None:
    """The recovery's history replays and issues the commands of the stored one ``name``
    (support/histories.py; tests/workflows/test_replay.py replays every stored history)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    keep(name, history)
    replayer = Replayer(workflows=[RecoveryWorkflow], data_converter=client.data_converter)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure


async def test_six_concurrent_recoveries_on_two_workers_drain_only_the_budget_of_two(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    """8 nodes, a budget of 2, six concurrent node losses: 2 drained (it used to be 6), and
    all six jobs still restart (excluding their dead node); operators are told once."""
    config = operator_config(
        isolation={"max_drain_nodes": 2, "max_drain_fraction": 1.0, "min_drain_budget": 0},
    )
    scheduler = FakeScheduler.with_nodes(8, cluster_name=config.cluster.name)
    jobs = lost_node_jobs(scheduler, 6)
    async with workers(temporal_client, config, scheduler, count=2):
        ids = await asyncio.gather(*[start(temporal_client, config, j) for j in jobs])
        outcomes = await asyncio.gather(*[result(temporal_client, i) for i in ids])
        state = await budget_state(temporal_client, config.cluster.name)
        await until(
            lambda: asyncio.sleep(0, notifications(config, "drain_budget_tripped")),
            "the trip notification",
        )
    drained = [n for o in outcomes for n in o.drained_nodes]
    assert len(drained) == 2 and drained_by_us(scheduler) == sorted(drained)
    assert all(o.recovered and o.requeued for o in outcomes), [o.notes for o in outcomes]
    for outcome in outcomes:
        assert outcome.excluded_nodes == scheduler.jobs[outcome.job_id].excluded_nodes
    refused = [o for o in outcomes if not o.drained_nodes]
    assert len(refused) == 4
    assert all(any("drain budget reached" in n for n in o.notes) for o in refused)
    assert len(notifications(config, "drain_budget_tripped")) == 1
    assert state is not None and state.trips == 1 and state.denied_total == 4
    shown = view(state, datetime.now(UTC))
    assert (shown.scopes[0].used, shown.scopes[0].limit) == (2, 2)
    assert sorted(u.node for u in shown.scopes[0].uses) == sorted(drained)


def gated_plans(tmp_path: Path, timeout_s: float = 600, on_timeout: str = "deny") -> Path:
    path = tmp_path / "gated.yaml"
    path.write_text(
        f"""
version: 1
plans:
  - name: gated-drain
    when: {{actions: [drain_and_restart]}}
    approval: {{timeout_s: {timeout_s}, on_timeout: {on_timeout}}}
    steps:
      - activity: recovery.drain_nodes
      - use: restart-from-checkpoint
"""
    )
    return path


class GatedRecovery(NamedTuple):
    config: ResurrectConfig
    scheduler: FakeScheduler
    workflow_id: str
    keys: dict[str, Path]  # each operator's own key file


@pytest_asyncio.fixture
async def gated(
    temporal_client: Client, operator_config: ConfigFor, tmp_path: Path
) -> AsyncIterator[GatedRecovery]:
    """A node loss whose recovery plan needs approval, waiting for it, on one worker that
    takes answers signed by alice, bob or eve."""
    keys_dir, keys = operator_keys(tmp_path, "alice", "bob", "eve")
    config = operator_config(
        plans={"paths": [str(gated_plans(tmp_path))]},
        approvals={"operator_keys_dir": str(keys_dir)},
    )
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    (info,) = lost_node_jobs(scheduler, 1)
    async with workers(temporal_client, config, scheduler, count=1):
        workflow_id = await start(temporal_client, config, info)
        await awaiting(temporal_client, workflow_id)
        yield GatedRecovery(config, scheduler, workflow_id, keys)


async def test_an_approval_gated_plan_waits_and_runs_once_approved(
    temporal_client: Client, gated: GatedRecovery
) -> None:
    config, scheduler, workflow_id, keys = gated
    # It waits on the approval gate, where it issues no command until an answer or the
    # timeout: what it did before is all it does while it waits, and none of it is a step.
    before = commands(await temporal_client.get_workflow_handle(workflow_id).fetch_history())
    called = {c.rsplit(" ", 1)[-1] for c in before if c.startswith(("activity", "local activity"))}
    assert called <= {Activity.GATHER_EVIDENCE, Activity.ASSESS}, before
    assert scheduler.calls == []  # nothing is done while it waits
    described = await temporal_client.get_workflow_handle(workflow_id).describe()
    attributes = {k.name: v for k, v in described.typed_search_attributes}
    assert attributes["ResurrectPhase"] == "awaiting_approval"
    answer = await decide_approval(
        config, workflow_id, approved=True, key_file=keys["alice"], reason="rack checked"
    )
    assert answer.startswith("approved")
    outcome = await result(temporal_client, workflow_id)
    status = await temporal_client.get_workflow_handle(workflow_id).query(
        STATUS_QUERY, result_type=RecoveryWorkflowStatus
    )
    await replays(temporal_client, workflow_id, "approval-gated-nr-read-twice")
    assert outcome.recovered and outcome.drained_nodes == ["node1"]
    assert any("approved by alice: rack checked" in n for n in outcome.notes)
    assert status.approvals[0].by == "alice" and status.approvals[0].approved


async def test_a_denied_plan_changes_nothing_and_a_second_answer_is_refused(
    temporal_client: Client, gated: GatedRecovery
) -> None:
    config, scheduler, workflow_id, keys = gated
    await decide_approval(
        config, workflow_id, approved=False, key_file=keys["bob"], reason="maintenance"
    )
    outcome = await result(temporal_client, workflow_id)
    with pytest.raises(ResurrectError, match=r"not awaiting approval|completed"):
        await decide_approval(
            config, workflow_id, approved=True, key_file=keys["eve"], reason="late"
        )
    assert outcome.outcome == "denied" and scheduler.calls == []
    assert any("denied by bob: maintenance" in n for n in outcome.notes)


async def test_without_an_answer_the_plans_default_applies(
    temporal_client: Client, operator_config: ConfigFor, tmp_path: Path
) -> None:
    plans = gated_plans(tmp_path, timeout_s=2, on_timeout="approve")
    config = operator_config(plans={"paths": [str(plans)]})
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    (info,) = lost_node_jobs(scheduler, 1)
    async with workers(temporal_client, config, scheduler, count=1):
        outcome = await result(temporal_client, await start(temporal_client, config, info))
    assert outcome.recovered
    assert any("approved by timeout" in n for n in outcome.notes)


async def test_a_drain_over_budget_waits_for_approval_when_configured(
    temporal_client: Client, operator_config: ConfigFor, tmp_path: Path
) -> None:
    keys_dir, keys = operator_keys(tmp_path, "carol")
    config = operator_config(
        isolation={
            "max_drain_nodes": 1,
            "max_drain_fraction": 1.0,
            "over_budget": "await_approval",
        },
        approvals={"operator_keys_dir": str(keys_dir)},
    )
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    first, second = lost_node_jobs(scheduler, 2)
    async with workers(temporal_client, config, scheduler, count=1):
        one = await result(temporal_client, await start(temporal_client, config, first))
        workflow_id = await start(temporal_client, config, second)
        await awaiting(temporal_client, workflow_id)
        assert drained_by_us(scheduler) == ["node1"]
        await decide_approval(
            config, workflow_id, approved=True, key_file=keys["carol"], reason="ok"
        )
        two = await result(temporal_client, workflow_id)
        state = await budget_state(temporal_client, config.cluster.name)
        await replays(temporal_client, workflow_id, "over-budget-approved-nr-read-twice")
    assert one.drained_nodes == ["node1"] and two.drained_nodes == ["node2"]
    assert drained_by_us(scheduler) == ["node1", "node2"]
    assert state is not None
    assert [r.approved_by for r in state.records] == [None, "carol"]


async def test_a_node_someone_else_drained_is_not_reported_as_drained(
    temporal_client: Client, operator_config: ConfigFor
) -> None:
    config = operator_config()
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    (info,) = lost_node_jobs(scheduler, 1)
    scheduler.nodes["node1"] = NodeInfo(
        name="node1", state="DOWN", flags=["NOT_RESPONDING", "DRAIN"], reason="admin: PSU"
    )
    async with workers(temporal_client, config, scheduler, count=1):
        outcome = await result(temporal_client, await start(temporal_client, config, info))
    assert outcome.recovered and outcome.drained_nodes == []
    assert outcome.excluded_nodes == ["node1"]
    assert any("already drained by someone else (admin: PSU)" in n for n in outcome.notes)
    assert scheduler.nodes["node1"].reason == "admin: PSU"
