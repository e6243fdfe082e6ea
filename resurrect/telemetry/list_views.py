"""Saved questions for the Temporal UI's workflow list (and ``temporal workflow list -q``).

Paste the query into the list view's search box; docs/observability.md lists them too.
"""

from __future__ import annotations

from datetime import UTC, datetime

RECOVERIES = "WorkflowType = 'RecoveryWorkflow'"


def recoveries_since_by_class(since: datetime, fault_class: str) -> str:
    """Recoveries of one fault class started since ``since`` (e.g. today 00:00 UTC)."""
    stamp = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{RECOVERIES} AND StartTime >= '{stamp}' AND ResurrectFaultClass = '{fault_class}'"


def not_recovered() -> str:
    """Recoveries that ended without the job running again (any outcome but recovered, or a
    workflow that failed, timed out, was terminated or cancelled)."""
    return (
        f"{RECOVERIES} AND ExecutionStatus != 'Running'"
        " AND (ResurrectOutcome != 'recovered' OR ExecutionStatus != 'Completed')"
    )


def touched_node(node: str) -> str:
    """Every workflow that named ``node`` (a recovery's job ran on it, or it was drained)."""
    return f"ResurrectNodes = '{node}'"
