"""Reading a workflow's history: which activities it ran.

Since ``lean-recovery`` the quick plan steps of a recovery run as local activities, recorded
as markers (``core_local_activity``) rather than ``ActivityTaskScheduled`` events; both say
which step ran, and what the Temporal UI shows for it.
"""

from __future__ import annotations

import json

from temporalio.api.common.v1 import Payloads
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

LOCAL_ACTIVITY_MARKER = "core_local_activity"


def local_activity(event: HistoryEvent) -> tuple[str, Payloads] | None:
    """(activity type, result) of a local activity's marker; None for any other event (and
    for a local activity that failed: its marker has no result)."""
    marker = event.marker_recorded_event_attributes
    if marker.marker_name != LOCAL_ACTIVITY_MARKER:
        return None
    data = marker.details["data"].payloads[0].data
    name = str(json.loads(data)["activity_type"])
    return name, marker.details["result"] if "result" in marker.details else Payloads()


def activities_run(history: WorkflowHistory) -> list[str]:
    """The activity type of every activity task and local activity, in history order."""
    names: list[str] = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            names.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif (local := local_activity(event)) is not None:
            names.append(local[0])
    return names
