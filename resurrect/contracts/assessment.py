"""What the recovery's one evidence + attribution activity (``recovery.assess``) takes and
returns: the diagnosis and every other input of the decision (the restarts already charged,
the plans, the approval settings, which steps run as local activities first), in one
history event.
"""

from __future__ import annotations

from pydantic import Field

from resurrect.config import ApprovalSettings
from resurrect.contracts import Contract, Diagnosis, Evidence, RecoveryContext, RestartHistory
from resurrect.lemons.models import LemonScore
from resurrect.plans.models import ResolvedPlan


class AssessRequest(Contract):
    """The evidence gathered, what other sensors reported, and the recovery asking."""

    bundle: RecoveryContext
    reported: list[Evidence] = Field(default_factory=list)  # evidence other sensors sent
    workflow_id: str  # the recovery asking: not counted among the earlier ones
    # The first attempt, a local activity: answer within this many seconds or raise
    # NeedsMoreTime (waiting for a node agent's confirmation always needs more).
    quick_s: float | None = None


class Assessment(Contract):
    """One diagnosis and what the decision needs besides it."""

    diagnosis: Diagnosis
    charged_restarts: int  # earlier recoveries of this job charged to its restart budget
    # The worker's checked plans that the decision looks up, in match order (every plan in
    # histories recorded before: the decision is the same; plans/decide.plans_looked_up).
    plans: list[ResolvedPlan]
    approvals: ApprovalSettings
    # Plan steps the recovery tries first as local activities (the worker's
    # ``quick_steps`` among those of ``plans``): they finish in seconds and are safe to run
    # again from the start (check before act).
    quick_steps: list[str] = Field(default_factory=list)
    history: RestartHistory = Field(default_factory=RestartHistory)
    # The cluster's lemon nodes and the nodes this recovery implicated, scored with this
    # recovery's incidents (resurrect/lemons; the decision's rule 11).
    lemons: list[LemonScore] = Field(default_factory=list)
    # The job incarnation the earlier recoveries were matched with (its key,
    # resurrect/job_incarnation.py), recorded on this recovery for the next ones; None in
    # histories recorded before recoveries named it.
    incarnation: str | None = None
