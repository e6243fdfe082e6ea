"""The approval gate of a recovery: wait durably for ``approve`` / ``deny`` (Temporal
Updates carrying who and why), or take the default when the timeout passes.

Used by :class:`workflows.recovery.RecoveryWorkflow`, which exposes the updates and sets
its phase to ``awaiting_approval`` (query ``phase``, search attribute ``ResurrectPhase``)
while it waits. Decisions are kept in order; each is also a note of the recovery, so the
decision and its author are in the history and in the UI.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from resurrect.contracts.recovery_status import ApprovalDecision
    from resurrect.operator.models import ApprovalInput


class ApprovalGate:
    def __init__(self) -> None:
        self.waiting_for: str | None = None
        self._answer: ApprovalDecision | None = None
        self.decisions: list[ApprovalDecision] = []

    def validate(self) -> None:
        """Reject an approve/deny while nothing waits (the update fails; history unchanged)."""
        if self.waiting_for is None or self._answer is not None:
            raise ValueError("this recovery is not awaiting approval")

    def answer(self, approved: bool, given: ApprovalInput) -> str:
        assert self.waiting_for is not None
        self._answer = ApprovalDecision(
            approved=approved,
            by=given.by,
            reason=given.reason,
            at=workflow.now(),
            what=self.waiting_for,
        )
        return f"{'approved' if approved else 'denied'}: {self.waiting_for}"

    async def wait(
        self, what: str, timeout_s: float, default: Literal["approve", "deny"]
    ) -> ApprovalDecision:
        """Wait for a person's answer to ``what``; after ``timeout_s`` take ``default``."""
        self.waiting_for = what
        self._answer = None
        try:
            await workflow.wait_condition(
                lambda: self._answer is not None, timeout=timedelta(seconds=timeout_s)
            )
            assert self._answer is not None
            decision = self._answer
        except TimeoutError:
            decision = ApprovalDecision(
                approved=default == "approve",
                by="timeout",
                reason=f"no answer within {timeout_s:g} s: default {default}",
                at=workflow.now(),
                what=what,
            )
        self.waiting_for = None
        self._answer = None
        self.decisions.append(decision)
        return decision


def describe(decision: ApprovalDecision) -> str:
    verb = "approved" if decision.approved else "denied"
    why = f": {decision.reason}" if decision.reason else ""
    return f"{decision.what}: {verb} by {decision.by}{why}"
