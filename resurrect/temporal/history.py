"""Reading a workflow's history: which activities it ran.

Since ``lean-recovery`` the quick plan steps of a recovery run as local activities, recorded
as markers (``core_local_activity``) rather than ``ActivityTaskScheduled`` events; both say
which step ran, and what the Temporal UI shows for it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import NamedTuple

from temporalio.api.common.v1 import Payloads
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

LOCAL_ACTIVITY_MARKER = "core_local_activity"


class LocalActivity(NamedTuple):
    """What a local activity's marker says: which activity, its result (empty when it
    failed), and when it finished (None in markers that do not say)."""

    name: str
    result: Payloads
    completed_at: datetime | None


def local_activity(event: HistoryEvent) -> LocalActivity | None:
    """The local activity a marker records; None for any other event.

    Several local activities can finish within one workflow task, whose completion is the
    marker's event time: ``completed_at`` is when each one itself finished."""
    marker = event.marker_recorded_event_attributes
    if marker.marker_name != LOCAL_ACTIVITY_MARKER:
        return None
    data = json.loads(marker.details["data"].payloads[0].data)
    completed: datetime | None = None
    stamp = data.get("complete_time")
    if isinstance(stamp, dict) and isinstance(seconds := stamp.get("seconds"), int):
        nanos = stamp.get("nanos")
        fraction = nanos / 1e9 if isinstance(nanos, int) else 0.0
        completed = datetime.fromtimestamp(seconds + fraction, tz=UTC)
    result = marker.details["result"] if "result" in marker.details else Payloads()
    return LocalActivity(str(data["activity_type"]), result, completed)


def activities_run(history: WorkflowHistory) -> list[str]:
    """The activity type of every activity task and local activity, in history order."""
    names: list[str] = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            names.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif (local := local_activity(event)) is not None:
            names.append(local.name)
    return names
