"""Reading a workflow's history: which activities it ran.

Since ``lean-recovery`` the quick plan steps of a recovery run as local activities, recorded
as markers (``core_local_activity``) rather than ``ActivityTaskScheduled`` events; both say
which step ran, and what the Temporal UI shows for it.
"""

from __future__ import annotations

import json

from temporalio.client import WorkflowHistory

LOCAL_ACTIVITY_MARKER = "core_local_activity"


def activities_run(history: WorkflowHistory) -> list[str]:
    """The activity type of every activity task and local activity, in history order."""
    names: list[str] = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            names.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif event.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER:
            data = event.marker_recorded_event_attributes.details["data"].payloads[0].data
            names.append(str(json.loads(data)["activity_type"]))
    return names
