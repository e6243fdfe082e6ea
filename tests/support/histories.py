"""Stored workflow histories for the replay tests (tests/workflows/test_replay.py).

They live in ``tests/fixtures/histories/<workflow type>/<name>.json``. A stored history is a
workflow as the code of some release recorded it: replaying it with today's code must not
hit non-determinism, or workflows in flight during an upgrade would fail.

The dev-server tests that run each kind of workflow hand the history they just made to
:func:`keep`. Without ``RESURRECT_RECORD_HISTORIES`` it checks that the fresh history issued
the same kinds of command as the stored one of that name (:func:`commands`), so a change to a workflow's commands
fails a test until a new history is stored and the change is versioned (docs/versioning.md).
With ``RESURRECT_RECORD_HISTORIES=1`` it stores the fresh history::

    RESURRECT_RECORD_HISTORIES=1 .venv/bin/python -m pytest \\
        tests/workflows/test_recovery_workflow.py -k histories \\
        tests/workflows/test_drain_budget_and_approvals.py \\
        tests/workflows/test_operator_task_queue.py -k by_default \\
        tests/workflows/test_recovery_decisions.py -k slurmctld \\
        tests/workflows/test_node_health.py -k "root_finding or silence" \\
        tests/stacks/test_agent_ranks.py -k silent_one

Store a new history under a new name when a versioned change lands; keep the old ones until
the release that drops their patch (docs/versioning.md). Never re-record a history to make a
replay failure go away: that failure is what the test is for.
"""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

from resurrect.temporal.history import local_activity

HISTORIES = Path(__file__).parents[1] / "fixtures" / "histories"


def workflow_type(history: WorkflowHistory) -> str:
    """The workflow type a history belongs to (from its first event)."""
    started = history.events[0].workflow_execution_started_event_attributes
    return str(started.workflow_type.name)


def _command(event: HistoryEvent) -> str | None:
    """The command a workflow issued that made ``event``, by kind and name; None for events
    the server or a worker wrote on their own (workflow tasks, activity progress)."""
    kind = event.WhichOneof("attributes") or ""
    if event.HasField("activity_task_scheduled_event_attributes"):
        return f"activity {event.activity_task_scheduled_event_attributes.activity_type.name}"
    if (local := local_activity(event)) is not None:
        return f"local activity {local.name}"
    if event.HasField("marker_recorded_event_attributes"):
        return f"marker {event.marker_recorded_event_attributes.marker_name}"
    if event.HasField("timer_started_event_attributes"):
        return "timer"
    if kind.startswith(("workflow_task_", "activity_task_", "timer_fired", "timer_canceled")):
        return None
    if kind.startswith(("workflow_execution_signaled", "workflow_execution_update")):
        return None  # what others sent: not a command
    return kind.removesuffix("_event_attributes")


def commands(history: WorkflowHistory) -> list[str]:
    """The kinds of command a workflow issued (each once, sorted): a new, renamed or removed
    activity, timer, marker or patch shows; how often a loop issued each does not (it may
    depend on timing: a node-health run's heartbeats), nor whether a local first attempt
    gave way to an activity task of the same name (it depends on how fast the local attempt
    ran: workflows/activity_calls.py)."""
    issued = {c for c in map(_command, history.events) if c is not None}
    return sorted(c for c in issued if not _is_fallback(c, issued))


def _is_fallback(command: str, issued: set[str]) -> bool:
    """``command`` is an activity task that a local first attempt of the same name gave
    way to."""
    return command.startswith("activity ") and f"local {command}" in issued


def keep(name: str, history: WorkflowHistory) -> Path:
    """Store ``history`` as ``<type>/<name>.json`` when recording is asked for; otherwise
    fail unless the stored history of that name issued the same commands."""
    path = HISTORIES / workflow_type(history) / f"{name}.json"
    if os.environ.get("RESURRECT_RECORD_HISTORIES"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(history.to_json())
        return path
    assert path.exists(), f"no stored history {path}: record it (tests/support/histories.py)"
    stored = commands(load(path))
    fresh = commands(history)
    assert fresh == stored, (
        f"{workflow_type(history)} issues other commands than its stored history {name}:"
        f" {fresh} != {stored}. Version the change and store a new history"
        " (docs/versioning.md)."
    )
    return path


def stored() -> list[Path]:
    """Every stored history file, sorted."""
    return sorted(HISTORIES.glob("*/*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"{path.parent.name}/{path.stem}", path.read_text())
