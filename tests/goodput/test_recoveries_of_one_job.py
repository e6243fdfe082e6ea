"""A job's checkpoint advice reads its own recoveries (``load_recoveries(job=...)``), not
those of another job that had its id (resurrect/job_incarnation.py), on the real dev
server: the lost time and intervals of job 41's first holder must not shape the advice to
the job that holds the id now."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio
from support.builders import job
from support.recovery_records import Records
from temporalio.client import Client

from resurrect.goodput.history import load_recoveries
from resurrect.job_incarnation import Incarnation

pytestmark = pytest.mark.temporal

OWNER = 1001
FIRST_SUBMIT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
NOW_SUBMIT = FIRST_SUBMIT + timedelta(days=40)


@pytest_asyncio.fixture
async def records(temporal_client: Client) -> AsyncIterator[Records]:
    made = Records(temporal_client)
    yield made
    await made.remove()


async def test_the_advice_reads_only_the_recoveries_of_the_job_holding_the_id(
    records: Records, temporal_client: Client
) -> None:
    first = Incarnation(OWNER, int(FIRST_SUBMIT.timestamp()))
    now = Incarnation(OWNER, int(NOW_SUBMIT.timestamp()))
    for restart in (3, 4, 5):
        await records.add("41", restart, first)
    before_keys = await records.add("41", 0, None)  # recorded before records named one
    own = [await records.add("41", restart, now) for restart in (1, 2)]
    await records.visible()
    holder = job("41", restart_count=3).model_copy(
        update={"submit_time": NOW_SUBMIT + timedelta(hours=2), "user_id": OWNER}
    )
    read = await load_recoveries(temporal_client, job_id="41", cluster=records.cluster, job=holder)
    assert sorted(r.workflow_id for r in read) == sorted([before_keys, *own])
    everyone = await load_recoveries(temporal_client, job_id="41", cluster=records.cluster)
    assert len(everyone) == 6  # without a job: every recovery of the id, as reports list them
