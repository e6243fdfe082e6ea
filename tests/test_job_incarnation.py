"""Which job an earlier recovery record belongs to (resurrect/job_incarnation.py), with the
values Slurm showed across requeues (docs/security.md, job incarnations): ``SubmitTime`` set
to each requeue's moment, ``Restarts`` counting up, the uid unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.builders import job

from resurrect.contracts import JobInfo
from resurrect.job_incarnation import Incarnation, incarnation_of, same_job

SUBMITTED = datetime(2026, 12, 3, 14, 23, 48, tzinfo=UTC)
OWNER, OTHER = 1001, 1002


def read(restarts: int, submitted: datetime | None, uid: int | None = OWNER) -> JobInfo:
    """The job as Slurm shows it after ``restarts`` requeues."""
    return job("7", restart_count=restarts).model_copy(
        update={"submit_time": submitted, "user_id": uid}
    )


FIRST = incarnation_of(read(0, SUBMITTED), ())


def test_a_job_never_requeued_is_named_by_its_uid_and_submit_time() -> None:
    assert FIRST == Incarnation(OWNER, int(SUBMITTED.timestamp()))
    assert FIRST.key == f"{OWNER}/{int(SUBMITTED.timestamp())}"
    assert Incarnation.parse(FIRST.key) == FIRST


def test_requeued_attempts_keep_the_incarnation_their_recoveries_recorded() -> None:
    # Slurm sets SubmitTime to the requeue's moment (observed on 22.05 and 26.05)
    for restarts, requeued_at in [(1, 3), (2, 12), (3, 19)]:
        now = read(restarts, SUBMITTED + timedelta(seconds=requeued_at))
        assert incarnation_of(now, [FIRST]) == FIRST
        assert incarnation_of(now, [None, FIRST, None]) == FIRST


def test_another_uid_is_another_job() -> None:
    reused = read(3, SUBMITTED + timedelta(days=1), uid=OTHER)
    mine = incarnation_of(reused, [FIRST])
    assert mine == Incarnation(OTHER, int((SUBMITTED + timedelta(days=1)).timestamp()))
    assert not same_job(FIRST, mine)


def test_a_later_incarnation_of_the_same_uid_is_told_from_the_older_one() -> None:
    older = Incarnation(OWNER, int((SUBMITTED - timedelta(days=3)).timestamp()))
    assert incarnation_of(read(0, SUBMITTED), [older]) == FIRST  # never requeued: its own
    # requeued, with records of its own and of the older job: the newest one up to now
    assert incarnation_of(read(2, SUBMITTED + timedelta(minutes=5)), [older, FIRST]) == FIRST
    assert incarnation_of(read(2, SUBMITTED + timedelta(minutes=5)), [FIRST, older]) == FIRST
    assert not same_job(older, FIRST)


def test_an_incarnation_submitted_after_the_job_is_not_its_own() -> None:
    future = Incarnation(OWNER, int((SUBMITTED + timedelta(hours=1)).timestamp()))
    assert incarnation_of(read(1, SUBMITTED + timedelta(minutes=1)), [future]) == Incarnation(
        OWNER, int((SUBMITTED + timedelta(minutes=1)).timestamp())
    )


def test_the_owner_requeueing_keeps_the_recorded_incarnation() -> None:
    # an owner's `scontrol requeue` makes the submit time later and Restarts higher
    assert incarnation_of(read(9, SUBMITTED + timedelta(days=20)), [FIRST]) == FIRST


def test_records_of_no_incarnation_count_as_the_jobs_own() -> None:
    assert same_job(None, FIRST)
    assert same_job(FIRST, FIRST)


def test_unknown_uid_or_submit_time_is_its_own_value() -> None:
    unknown = incarnation_of(read(0, None, uid=None), ())
    assert unknown == Incarnation(None, None) and unknown.key == "-/-"
    assert Incarnation.parse("-/-") == unknown
    assert incarnation_of(read(1, SUBMITTED, uid=None), [unknown]) == unknown


@pytest.mark.parametrize(
    "key",
    [None, 5, "", "1001", "1001/", "/5", "1001/5/6", "x/5", "1001/ 5", "1001/\u00b2", "-1/5"],
)
def test_keys_of_another_shape_name_no_incarnation(key: object) -> None:
    assert Incarnation.parse(key) is None
