"""Which errors a recovery retries is read off the exception tree (resurrect/errors.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from temporalio.exceptions import ApplicationErrorCategory

from resurrect import errors
from resurrect.errors import NonRetryable, ResurrectError, failure_of, non_retryable_error_types
from resurrect.workflows.recovery import SCHEDULER_RETRY


def test_permanent_errors_are_listed_with_every_subclass() -> None:
    names = non_retryable_error_types()
    assert {
        "JobNotFound",
        "NodeNotFound",
        "SchedulerRefused",
        "JobAlreadyPending",  # a subclass: Temporal matches exact class names
        "InvalidSchedulerArgument",
        "PermanentStepError",
        "PolicyError",
        "ConfigError",
    } <= set(names)
    assert names == sorted(set(names)) and "NonRetryable" not in names


def test_errors_that_may_heal_are_retried() -> None:
    names = set(non_retryable_error_types())
    assert not {"SchedulerUnavailable", "SchedulerError", "TransientStepError"} & names
    assert "NodeNotRegistered" not in names
    assert not {"CheckpointError", "StepError", "ResurrectError"} & names


def test_the_list_is_exactly_the_marked_part_of_the_tree() -> None:
    tree = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, ResurrectError)
    ]
    marked = {cls.__name__ for cls in tree if issubclass(cls, NonRetryable)} - {"NonRetryable"}
    assert marked == set(non_retryable_error_types())


def test_the_workflow_uses_the_derived_list() -> None:
    assert SCHEDULER_RETRY.non_retryable_error_types == non_retryable_error_types()


def test_an_activity_ends_with_a_failure_named_by_the_errors_class() -> None:
    failure = failure_of(errors.JobNotFound("job 7 is not known"))
    assert (failure.type, failure.message) == ("JobNotFound", "job 7 is not known")
    assert failure.non_retryable
    assert failure.category is ApplicationErrorCategory.UNSPECIFIED


def test_a_failure_that_may_heal_is_retried_and_a_quick_attempt_out_of_time_is_benign() -> None:
    assert not failure_of(errors.SchedulerUnavailable("slurmctld did not answer")).non_retryable
    more_time = failure_of(errors.NeedsMoreTime("job output not read within 3 s"))
    assert not more_time.non_retryable
    assert more_time.category is ApplicationErrorCategory.BENIGN


def test_the_tree_imports_without_temporal() -> None:
    """The helpers that run as a job's owner import the tree, and must not pay for
    Temporal's protobufs."""
    code = "import sys, resurrect.errors; assert 'temporalio' not in sys.modules"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
