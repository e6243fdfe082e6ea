"""A node's repair record answers which recoveries drained it (``NodeRepairState.drained_by``):
the drain step asks it before draining a node it finds in service, the repair workflow
before taking up a drain report."""

from __future__ import annotations

from datetime import UTC, datetime

from resurrect.operator.models import (
    NodeDrainReport,
    NodeEvent,
    NodeRepairState,
    RepairTimings,
)

TIMINGS = RepairTimings(
    cool_down_s=300, check_timeout_s=60, recheck_interval_s=600, max_checks=3, probation_s=3600
)
NOW = datetime(2026, 12, 1, 20, 24, 42, tzinfo=UTC)


def report(incident: str, kind: str = "drained") -> NodeDrainReport:
    return NodeDrainReport.model_validate(
        {"incident": incident, "job_id": "102", "fault_class": "gpu.hardware",
         "reason": f"resurrect: gpu.hardware job 102 [{incident}]", "kind": kind}
    )  # fmt: skip


def state(**fields: object) -> NodeRepairState:
    return NodeRepairState(cluster="c", node="node6", timings=TIMINGS).model_copy(update=fields)


def test_a_drain_report_waiting_or_taken_up_names_its_recovery() -> None:
    waiting = state(pending=[report("recover/c/102/0")])
    taken_up = state(events=[NodeEvent(at=NOW, kind="drained", incident="recover/c/102/0")])
    assert waiting.drained_by("recover/c/102/0") and taken_up.drained_by("recover/c/102/0")


def test_other_recoveries_and_other_events_are_not_a_drain_by_this_one() -> None:
    record = state(
        pending=[report("recover/c/63/0")],
        events=[
            NodeEvent(at=NOW, kind="drained", incident="recover/c/63/0"),
            NodeEvent(at=NOW, kind="excluded", incident="recover/c/102/0"),
            NodeEvent(at=NOW, kind="returned", incident="recover/c/102/0"),
        ],
    )
    assert not record.drained_by("recover/c/102/0")
    assert not state().drained_by("recover/c/102/0")
