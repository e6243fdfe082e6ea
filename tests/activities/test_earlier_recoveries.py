"""Which earlier recoveries of a job id a recovery counts as its job's, and what reading them
costs (``RecoveryActivities.read_earlier_recoveries``; resurrect/job_incarnation.py), on the
real dev server.

The records are what recoveries leave in visibility (their workflow ids and search
attributes), made by workflows started on a task queue no worker polls: job 31 of uid 1001
submitted on 5 January spent its budget; the id was handed out again (the ids wrapped, or
the controller's state was reset). Reading them is one visibility list and one count,
however many records the id has."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from support.builders import interruption, job, recovery_context
from support.recovery_records import Records
from temporalio.client import Client

from resurrect.activities.earlier_recoveries import EarlierRecoveries
from resurrect.activities.recovery import RecoveryActivities
from resurrect.config import ResurrectConfig, TemporalSettings
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.job_incarnation import Incarnation
from resurrect.rules.engine import default_engine
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal
from resurrect.testing import FakeScheduler
from resurrect.testing.counting import RPC_KINDS, count_temporal_calls

pytestmark = pytest.mark.temporal

JOB = "31"
OWNER, OTHER = 1001, 1002
FIRST_SUBMIT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
FIRST = Incarnation(OWNER, int(FIRST_SUBMIT.timestamp()))
REUSED_SUBMIT = FIRST_SUBMIT + timedelta(days=40)


async def read_as_recovery(
    records: Records, client: Client, restart: int, submitted: datetime, uid: int
) -> EarlierRecoveries:
    """What the recovery of attempt ``restart`` of job ``JOB`` as Slurm shows it now reads."""
    info = job(JOB, restart_count=restart).model_copy(
        update={"submit_time": submitted, "user_id": uid}
    )
    report = interruption(records.cluster, info)
    activities = RecoveryActivities(
        FakeScheduler.with_nodes(2), ResurrectConfig(), default_engine(), client=client
    )
    return await activities.read_earlier_recoveries(
        recovery_context(report, info), report.workflow_id
    )


@pytest_asyncio.fixture
async def records(temporal_client: Client) -> AsyncIterator[Records]:
    made = Records(temporal_client)
    yield made
    await made.remove()


@pytest_asyncio.fixture
async def counted(temporal_server: EmbeddedTemporal) -> Client:
    return await connect(TemporalSettings(), address=temporal_server.address, attempts=10)


async def spent_first_job(records: Records) -> None:
    """The first job: two charged restarts at attempts 3 and 4, stopped at 5 (its attempts
    before were requeued by Slurm, with no recovery)."""
    await records.add(JOB, 3, FIRST)
    await records.add(JOB, 4, FIRST)
    await records.add(JOB, 5, FIRST, charged=False, outcome="stopped")


async def test_a_job_reusing_the_id_of_another_owner_starts_with_a_fresh_budget(
    records: Records, counted: Client
) -> None:
    await spent_first_job(records)
    await records.visible()
    read = await read_as_recovery(records, counted, 1, REUSED_SUBMIT, OTHER)
    assert read.charged == 0 and read.attempts == []
    assert read.incarnation == Incarnation(OTHER, int(REUSED_SUBMIT.timestamp()))


async def test_a_job_reusing_the_id_of_the_same_owner_counts_its_own_recoveries_only(
    records: Records, counted: Client
) -> None:
    await spent_first_job(records)
    mine = Incarnation(OWNER, int(REUSED_SUBMIT.timestamp()))
    await records.add(JOB, 0, mine)
    await records.add(JOB, 1, mine)
    await records.visible()
    # attempt 2: Slurm set the submit time to the last requeue's moment
    read = await read_as_recovery(records, counted, 2, REUSED_SUBMIT + timedelta(minutes=9), OWNER)
    assert read.incarnation == mine
    assert read.charged == 2
    assert [a.restart_count for a in read.attempts] == [0, 1]


async def test_requeues_and_the_owners_requeues_keep_the_spent_budget(
    records: Records, counted: Client
) -> None:
    await spent_first_job(records)
    await records.visible()
    for restart, later in [(6, timedelta(hours=1)), (40, timedelta(days=30))]:
        read = await read_as_recovery(records, counted, restart, FIRST_SUBMIT + later, OWNER)
        assert read.incarnation == FIRST
        assert read.charged == 2
        assert [a.restart_count for a in read.attempts] == [3, 4, 5]


async def test_records_from_before_incarnations_count_as_the_jobs_own(
    records: Records, counted: Client
) -> None:
    await records.add(JOB, 0, None)
    await records.add(JOB, 1, None, charged=False, outcome="stopped")
    await records.add(JOB, 2, Incarnation(OTHER, int(FIRST_SUBMIT.timestamp())))
    await records.visible()
    read = await read_as_recovery(records, counted, 3, FIRST_SUBMIT + timedelta(hours=2), OWNER)
    assert read.charged == 1
    assert [a.restart_count for a in read.attempts] == [0, 1]


async def test_one_list_and_one_count_however_many_records_the_id_has(
    records: Records, counted: Client
) -> None:
    calls = count_temporal_calls(counted)
    await spent_first_job(records)
    await records.visible()
    calls.clear()
    await read_as_recovery(records, counted, 1, REUSED_SUBMIT, OTHER)
    few = calls.by_kind(RPC_KINDS)
    for restart in range(6, 46):  # forty more, of other owners' jobs that had the id
        await records.add(JOB, restart, Incarnation(OTHER + restart, restart))
    await records.visible()
    calls.clear()
    await read_as_recovery(records, counted, 1, REUSED_SUBMIT, OTHER)
    assert few == calls.by_kind(RPC_KINDS) == {"visibility": 2}, calls.calls


async def test_where_the_attempt_began_is_not_taken_from_another_jobs_recovery(
    records: Records, counted: Client, tmp_path: Path
) -> None:
    # recover/<cluster>/31/0 is the first job's: its record of where attempt 1 began in the
    # output file (the same path: slurm-31.out) says nothing of this job's attempt 1
    await records.add(JOB, 0, FIRST, outcome="recovered")
    await records.visible()
    out = tmp_path / "slurm-31.out"
    out.write_text("step 3\nsrun: error: node1: task 0: Segmentation fault (core dumped)\n")
    info = job(JOB, restart_count=1, stdout=out).model_copy(
        update={"submit_time": REUSED_SUBMIT, "user_id": os.getuid()}
    )
    report = interruption(records.cluster, info)
    bundle = recovery_context(report, info)
    activities = RecoveryActivities(
        FakeScheduler.with_nodes(2), ResurrectConfig(), default_engine(), client=counted
    )
    earlier = await activities.read_earlier_recoveries(bundle, report.workflow_id)
    assert earlier.another_jobs(0)
    diagnosis, _ = await activities.read_and_attribute(bundle, earlier=earlier)
    other = recovery_workflow_id(records.cluster, JOB, 0)
    assert f"{other} is another job's" in diagnosis.summary, diagnosis.summary


async def test_the_nodes_an_earlier_attempt_lost_are_those_of_its_free_node_loss_recovery(
    records: Records, counted: Client
) -> None:
    """A node counts as lost by an earlier attempt when that attempt's recovery recorded
    ``node.lost``, requeued the job and charged nothing (a node agent or Slurm confirmed it);
    a loss resting on the job's output alone (charged) or another class names no node."""
    await records.add(JOB, 0, FIRST, charged=False, fault_class="node.lost", nodes=["n3"])
    await records.add(JOB, 1, FIRST, charged=True, fault_class="node.lost", nodes=["n5"])
    await records.add(JOB, 2, FIRST, charged=False, fault_class="gpu.hardware", nodes=["n6"])
    await records.visible()
    read = await read_as_recovery(records, counted, 3, FIRST_SUBMIT, OWNER)
    assert read.lost_nodes == frozenset({"n3"})
