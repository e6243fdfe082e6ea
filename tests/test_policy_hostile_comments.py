"""Attacks through the job comment: it is the job owner's text, so it can never crash policy
parsing, opt a job in by accident, or ask for more than the operator's policy allows."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState
from resurrect.policy import PolicyResolution, resolve_job_policy

OBSERVE = ResurrectConfig.model_validate(
    {
        "mode": "observe",
        "policy": {
            "partitions": {
                "gpu": {"enabled": True, "max_restarts": 2, "hang_after_s": 600},
                "strict": {"enabled": True, "allow_restart_from_scratch": False},
            }
        },
    }
)
ACT = OBSERVE.model_copy(update={"mode": "act"})


def resolve(
    comment: str, partition: str = "batch", config: ResurrectConfig = OBSERVE
) -> PolicyResolution:
    job = JobInfo(job_id="66", state=JobState.RUNNING, comment=comment, partition=partition)
    return resolve_job_policy(job, config)


HOSTILE = [
    '{"resurrect": {"max_restarts": ' + "9" * 5000 + "}}",  # int() beyond 4,300 digits
    '{"resurrect": {"max_restarts": -' + "9" * 5000 + "}}",
    '{"resurrect": {"hang_after_s": 1e999}}',
    '{"resurrect": {"hang_after_s": NaN}}',
    '{"resurrect": {"hang_after_s": -Infinity}}',
    '{"resurrect": ' + "[" * 5000 + "]" * 5000 + "}",
    '{"resurrect": ' + '{"a":' * 3000 + "1" + "}" * 3000 + "}",
    '{"resurrect": false, "resurrect": true}',
    '{"resurrect": {"max_restarts": 1, "max_restarts": 900}}',
    '{"resurrect": {"checkpoint_dir": "/ckpt/\\ud800"}}',
    '{"resurrect": {"checkpoint_dir": "/ckpt/\\u0000/etc"}}',
    '{"resurrect": {"checkpoint_dir": "relative/../../etc"}}',
    '{"resurrect": {"notify": ["' + "x" * 300 + '"]}}',
    '{"resurrect": {"enabled": "false"}}',
    '{"resurrect": {"max_restarts": "3"}}',
    '{"resurrect": {"max_restarts": 3.5}}',
    '{"resurrect": {"enabled": false, "max_restart": 0}}',  # issue 9 item 12
    '{"resurrect": {"mode": "act", "__proto__": {}}}',
    '{"resurrect\u200b": true}',
    '{"RESURRECT": true}',
    "resurrect me please",
    '{"resurrect": 1}',
    '{"resurrect": null}',
    '{"resurrect": {}, "pad": "' + "x" * 20000 + '"}',  # over the size cap
]


@pytest.mark.parametrize("comment", HOSTILE)
@pytest.mark.parametrize("partition", ["batch", "gpu"])
def test_a_hostile_comment_never_raises_and_never_opts_in(comment: str, partition: str) -> None:
    resolution = resolve(comment, partition)
    assert resolution.source == "malformed_comment"
    assert not resolution.opted_in
    assert len(resolution.problems) == 1
    assert "not opted in" in resolution.problems[0] and "job 66" in resolution.problems[0]
    assert len(resolution.problems[0]) < 400  # a note, not the attacker's payload echoed


def test_the_problem_says_what_was_wrong() -> None:
    assert "5000 digits" in resolve(HOSTILE[0]).problems[0]
    assert "appears twice" in resolve(HOSTILE[7]).problems[0]
    assert "max_restart" in resolve(HOSTILE[16]).problems[0]


def test_a_comment_cannot_raise_the_mode_of_an_observe_cluster() -> None:
    resolution = resolve('{"resurrect": {"mode": "act"}}')
    assert resolution.opted_in and resolution.source == "comment"
    assert (resolution.policy.mode or OBSERVE.mode) == "observe"
    assert "mode 'act' not granted" in resolution.problems[0]


def test_a_comment_can_lower_the_mode_of_an_act_cluster() -> None:
    resolution = resolve('{"resurrect": {"mode": "observe"}}', config=ACT)
    assert resolution.policy.mode == "observe" and not resolution.problems
    granted = resolve('{"resurrect": {"mode": "act"}}', config=ACT)
    assert (granted.policy.mode or ACT.mode) == "act" and not granted.problems


def test_a_comment_can_lower_max_restarts_never_raise_them() -> None:
    assert resolve('{"resurrect": {"max_restarts": 1}}', "gpu").policy.max_restarts == 1
    raised = resolve('{"resurrect": {"max_restarts": 1000}}', "gpu")
    assert raised.opted_in and raised.policy.max_restarts == 2
    assert "max_restarts 1000 not granted: at most 2" in raised.problems[0]
    default = resolve('{"resurrect": {"max_restarts": 1000}}')
    assert default.policy.max_restarts == OBSERVE.policy.default.max_restarts


def test_a_comment_can_lengthen_the_hang_threshold_never_shorten_it() -> None:
    assert resolve('{"resurrect": {"hang_after_s": 3600}}', "gpu").policy.hang_after_s == 3600
    shorter = resolve('{"resurrect": {"hang_after_s": 60}}', "gpu")
    assert shorter.policy.hang_after_s == 600 and "at least 600" in shorter.problems[0]
    # where the operator set none, the job may ask for one for itself (floor 30 s)
    assert resolve('{"resurrect": {"hang_after_s": 60}}').policy.hang_after_s == 60
    assert not resolve('{"resurrect": {"hang_after_s": 5}}').opted_in


def test_a_comment_cannot_turn_restart_from_scratch_back_on() -> None:
    resolution = resolve('{"resurrect": {"allow_restart_from_scratch": true}}', "strict")
    assert resolution.policy.allow_restart_from_scratch is False
    assert "allow_restart_from_scratch not granted" in resolution.problems[0]


def test_opting_out_of_a_partition_default_is_always_allowed() -> None:
    for comment in ('{"resurrect": false}', '{"resurrect": {"enabled": false}}'):
        resolution = resolve(comment, "gpu")
        assert resolution.source == "comment" and not resolution.opted_in


def test_operator_recipients_stay_when_a_comment_adds_its_own() -> None:
    config = OBSERVE.model_copy(deep=True)
    config.policy.partitions["gpu"] = config.policy.partitions["gpu"].model_copy(
        update={"notify": ["ops@example.org"]}
    )
    resolution = resolve('{"resurrect": {"notify": ["me@example.org"]}}', "gpu", config)
    assert resolution.policy.notify == ["ops@example.org", "me@example.org"]


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=16,
)
policy_keys = st.sampled_from(
    [
        "enabled",
        "mode",
        "max_restarts",
        "checkpoint_dir",
        "hang_after_s",
        "notify",
        "allow_restart_from_scratch",
        "max_restart",
        "MODE",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(policy_keys, json_values, max_size=5), st.sampled_from(["batch", "gpu"]))
def test_fuzz_no_comment_ever_gets_more_than_the_operator_allows(
    section: dict[str, object], partition: str
) -> None:
    comment = json.dumps({"resurrect": section}, allow_nan=True)
    resolution = resolve(comment, partition)
    base = OBSERVE.policy.partitions.get(partition, OBSERVE.policy.default)
    assert resolution.source in {"comment", "malformed_comment"}
    if resolution.source == "malformed_comment":
        assert not resolution.opted_in and resolution.problems
        return
    policy = resolution.policy
    assert (policy.mode or OBSERVE.mode) == "observe"
    assert policy.max_restarts <= base.max_restarts
    assert policy.allow_restart_from_scratch <= base.allow_restart_from_scratch
    if base.hang_after_s is not None:
        assert policy.hang_after_s is not None and policy.hang_after_s >= base.hang_after_s


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.text(alphabet='{}[]":,0123456789eE.-+ \\u', max_size=200))
def test_fuzz_arbitrary_text_around_the_key(prefix: str, body: str) -> None:
    resolution = resolve(prefix + '{"resurrect": ' + body)
    assert resolution.source in {"comment", "malformed_comment", "default"}
    if resolution.source == "malformed_comment":
        assert not resolution.opted_in


PROGRESS_OPERATOR = ResurrectConfig.model_validate(
    {
        "mode": "act",
        "policy": {
            "partitions": {
                "gpu": {
                    "enabled": True,
                    "progress": {"straggler_duration_s": 300, "straggler_action": "restart"},
                },
                "quiet": {"enabled": True, "progress": {"hang_detection": False}},
            }
        },
    }
)


def test_a_comment_cannot_shorten_progress_thresholds_or_ask_for_straggler_restarts() -> None:
    hurried = resolve(
        '{"resurrect": {"progress": {"hang_floor_s": 5, "straggler_duration_s": 10,'
        ' "startup_s": 60, "straggler_action": "restart"}}}',
        partition="batch",
        config=PROGRESS_OPERATOR,
    )
    progress = hurried.policy.progress
    assert hurried.opted_in
    assert progress.straggler_duration_s == 120.0  # the operator's default stays
    assert progress.startup_s == 1800.0
    assert progress.straggler_action == "notify"
    assert any("straggler_action 'restart' not granted" in p for p in hurried.problems)
    assert any("progress.startup_s 60 not granted" in p for p in hurried.problems)


def test_a_comment_may_wait_longer_notify_instead_of_restart_or_turn_hang_detection_off() -> None:
    patient = resolve(
        '{"resurrect": {"progress": {"straggler_duration_s": 900, "straggler_action": "notify",'
        ' "hang_detection": false}}}',
        partition="gpu",
        config=PROGRESS_OPERATOR,
    )
    progress = patient.policy.progress
    assert (progress.straggler_duration_s, progress.straggler_action) == (900.0, "notify")
    assert progress.hang_detection is False
    assert patient.problems == []


def test_a_comment_cannot_turn_on_hang_detection_the_operator_turned_off() -> None:
    eager = resolve(
        '{"resurrect": {"progress": {"hang_detection": true}}}',
        partition="quiet",
        config=PROGRESS_OPERATOR,
    )
    assert eager.policy.progress.hang_detection is False
    assert any("hang_detection not granted" in p for p in eager.problems)
