"""What a recovery's ``status`` query returns (``resurrect status``, the Temporal UI)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from resurrect.contracts import Contract, RecoveryPhase, RecoveryState


class ApprovalDecision(Contract):
    """A person's answer to a plan or step that waited for approval (``resurrect
    approve|deny``, or the timeout's default), as the recovery recorded it."""

    approved: bool
    by: str
    reason: str = ""
    at: datetime
    what: str = ""  # what was asked


class RecoveryWorkflowStatus(Contract):
    """The phase, the plan and fault class chosen, the state the steps left, the notes, and
    what people were asked to approve and answered."""

    # a RecoveryPhase, or a plugin step's activity name while that step runs
    phase: RecoveryPhase | str = Field(union_mode="left_to_right")
    plan: str | None = None
    fault_class: str | None = None
    state: RecoveryState = RecoveryState()
    notes: list[str] = []
    awaiting_approval: str | None = None  # what a person is asked to approve
    approvals: list[ApprovalDecision] = []
