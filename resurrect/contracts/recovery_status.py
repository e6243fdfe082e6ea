"""What a recovery's ``status`` query returns (``resurrect status``, the Temporal UI)."""

from __future__ import annotations

from datetime import datetime

from resurrect.contracts import Contract, RecoveryState


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

    phase: str
    plan: str | None = None
    fault_class: str | None = None
    state: RecoveryState = RecoveryState()
    notes: list[str] = []
    awaiting_approval: str | None = None  # what a person is asked to approve
    approvals: list[ApprovalDecision] = []
