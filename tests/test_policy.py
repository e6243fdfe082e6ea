from __future__ import annotations

import json

import pytest

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobPolicy, JobState
from resurrect.policy import job_policy, resolve_job_policy


def make_job(comment: str = "", partition: str = "batch") -> JobInfo:
    return JobInfo(job_id="7", state=JobState.RUNNING, comment=comment, partition=partition)


CONFIG = ResurrectConfig.model_validate(
    {"policy": {"partitions": {"gpu": {"enabled": True, "max_restarts": 5}}}}
)


def test_no_comment_not_opted_in() -> None:
    assert job_policy(make_job(), CONFIG) is None


def test_comment_opts_in_with_its_settings() -> None:
    comment = json.dumps({"resurrect": {"max_restarts": 2, "checkpoint_dir": "/ckpt"}})
    policy = job_policy(make_job(comment), CONFIG)
    assert policy == JobPolicy(enabled=True, max_restarts=2, checkpoint_dir="/ckpt")


def test_true_opts_in_with_defaults_and_false_opts_out_of_a_partition_default() -> None:
    assert job_policy(make_job('{"resurrect": true}'), CONFIG) is not None
    assert job_policy(make_job('{"resurrect": false}', partition="gpu"), CONFIG) is None


def test_partition_default() -> None:
    resolution = resolve_job_policy(make_job(partition="gpu"), CONFIG)
    assert resolution.source == "partition" and resolution.policy.max_restarts == 5


@pytest.mark.parametrize(
    ("comment", "problem"),
    [
        ('{"resurrect": {"max_restarts": 3', "not JSON"),
        ('{"resurrect": {"max_restarts": -1}}', "max_restarts"),
        ('{"resurrect": {"rm -rf": 1}}', "rm -rf"),
        ('{"resurrect": "yes please"}', "must be an object"),
        ('["resurrect"]', "JSON object"),
        ("resurrect " + "x" * 20000, "longer than"),
        ('{"resurrect": ' * 1100, "not JSON"),
    ],
)
def test_malformed_comment_is_reported_and_not_opted_in(comment: str, problem: str) -> None:
    for partition in ("batch", "gpu"):  # not even where the partition opts jobs in
        resolution = resolve_job_policy(make_job(comment, partition=partition), CONFIG)
        assert resolution.source == "malformed_comment"
        assert not resolution.opted_in
        assert "not opted in" in resolution.problems[0]
        assert problem in resolution.problems[0]


def test_hang_threshold_from_the_comment() -> None:
    policy = job_policy(make_job(json.dumps({"resurrect": {"hang_after_s": 900}})), CONFIG)
    assert policy is not None and policy.hang_after_s == 900
    too_eager = resolve_job_policy(make_job(json.dumps({"resurrect": {"hang_after_s": 1}})), CONFIG)
    assert too_eager.source == "malformed_comment" and "hang_after_s" in too_eager.problems[0]
