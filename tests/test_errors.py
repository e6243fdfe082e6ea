"""Which errors a recovery retries is read off the exception tree (resurrect/errors.py)."""

from __future__ import annotations

from resurrect import errors
from resurrect.errors import NonRetryable, ResurrectError, non_retryable_error_types
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
