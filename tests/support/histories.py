"""Stored workflow histories for the replay tests (tests/workflows/test_replay.py).

They live in ``tests/fixtures/histories/<workflow type>/<name>.json``. A stored history is a
recovery (or node-health run) as an earlier version of the code recorded it: replaying it
with today's code must not hit non-determinism, or workflows in flight during an upgrade
would fail.

Recording: the dev-server tests that run each kind of workflow hand its history to
:func:`keep`, which writes it only when ``RESURRECT_RECORD_HISTORIES=1``::

    RESURRECT_RECORD_HISTORIES=1 .venv/bin/python -m pytest \\
        tests/workflows/test_recovery_workflow.py -k histories \\
        tests/workflows/test_node_health.py -k root_finding \\
        tests/stacks/test_agent_ranks.py -k silent_one

Record a new kind when a workflow gains one; never re-record to make a replay failure go
away (that failure is what the test is for: version the change with ``workflow.patched``).
"""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.client import WorkflowHistory

HISTORIES = Path(__file__).parents[1] / "fixtures" / "histories"


def workflow_type(history: WorkflowHistory) -> str:
    """The workflow type a history belongs to (from its first event)."""
    started = history.events[0].workflow_execution_started_event_attributes
    return str(started.workflow_type.name)


def keep(name: str, history: WorkflowHistory) -> Path | None:
    """Store ``history`` as ``<type>/<name>.json`` when recording is asked for."""
    if not os.environ.get("RESURRECT_RECORD_HISTORIES"):
        return None
    path = HISTORIES / workflow_type(history) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(history.to_json())
    return path


def stored() -> list[Path]:
    """Every stored history file, sorted."""
    return sorted(HISTORIES.glob("*/*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"{path.parent.name}/{path.stem}", path.read_text())
