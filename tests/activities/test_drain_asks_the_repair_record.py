"""When the drain step asks a node's repair record whether its recovery drained the node
before (``_drained_before``: a query to the node's repair workflow, and a describe): only
when the drain budget's answer cannot rule it out. A node the budget charged to its window for
the first time with this answer was named by no reservation of the window, this recovery's
own included, so a recovery younger than half a window never drained it. The step run again
after its drain (tests/workflows/test_drain_once_per_recovery.py) finds its own reservation
in the window and asks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from resurrect.activities.steps import _first_charged
from resurrect.config import ResurrectConfig
from resurrect.operator.models import DrainGrant
from resurrect.steps.runtime import StepContext, StepRuntime
from resurrect.testing import FakeScheduler
from resurrect.testing.steps import make_step_input

HOUR_S = 3600.0


def context(observed_ago: timedelta) -> StepContext:
    """The drain step's context in a recovery of an interruption observed ``observed_ago``."""
    step_input = make_step_input("recovery.drain_nodes")
    bundle = step_input.bundle
    observed = datetime.now(UTC) - observed_ago
    interruption = bundle.interruption.model_copy(update={"observed_at": observed})
    bundle = bundle.model_copy(update={"interruption": interruption})
    runtime = StepRuntime(scheduler=FakeScheduler(), config=ResurrectConfig())
    return StepContext(step_input.model_copy(update={"bundle": bundle}), runtime)


def test_a_node_charged_for_the_first_time_by_a_young_recovery_needs_no_question() -> None:
    grant = DrainGrant(granted=["node2", "node3"], recorded=["node2"])
    assert _first_charged(context(timedelta(seconds=5)), grant, HOUR_S) == {"node2"}


def test_the_record_is_asked_when_the_budget_does_not_say_or_the_recovery_is_old() -> None:
    says_nothing = DrainGrant(granted=["node2"])  # an earlier release's budget
    assert _first_charged(context(timedelta(seconds=5)), says_nothing, HOUR_S) == set()
    grant = DrainGrant(granted=["node2"], recorded=["node2"])
    # its own reservation may have left the window: the budget cannot rule a drain out
    assert _first_charged(context(timedelta(minutes=31)), grant, HOUR_S) == set()
    # observed later than now by this clock: its age is not known
    assert _first_charged(context(-timedelta(minutes=5)), grant, HOUR_S) == set()
