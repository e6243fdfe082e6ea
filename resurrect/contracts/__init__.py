"""The shared data contracts of resurrect, by topic.

Everything that crosses a boundary (sensor -> workflow, workflow -> activity, activity ->
scheduler, CLI -> JSON) is one of these pydantic models, strict at the edges (unknown fields
are rejected). The package imports nothing else of resurrect (except the module named
below), so every other module can depend on it without cycles, and workflow code can pass it
through the Temporal sandbox.

* :mod:`~resurrect.contracts.faults`: fault classes, actions, evidence, diagnoses;
* :mod:`~resurrect.contracts.scheduler`: job states, jobs, nodes;
* :mod:`~resurrect.contracts.policy`: a job's recovery policy;
* :mod:`~resurrect.contracts.recovery`: a recovery's report, decision, checkpoint verdict,
  restart history, outcome, and the inputs and results of its activities and steps;
* :mod:`~resurrect.contracts.workflow_ids`: every workflow id;
* :mod:`~resurrect.contracts.workflow_names`: the names by which workflows, signals,
  queries, updates and activities are called;
* :mod:`~resurrect.contracts.node_health`: the node health workflow's names, signals, query
  and activity models.

One module also carries models of other packages, and this ``__init__`` does not import it:
:mod:`~resurrect.contracts.assessment` (what ``recovery.assess`` takes and returns: the
config's approval settings, the checked plans, the lemon scores; ``[tool.importlinter]`` in
pyproject.toml lists these imports). Nor does it import
:mod:`~resurrect.contracts.recovery_status` (the recovery's ``status`` query).
"""

from __future__ import annotations

from resurrect.contracts.base import (
    Contract,
)
from resurrect.contracts.faults import (
    DEFAULT_ACTION,
    Diagnosis,
    Evidence,
    EvidenceRole,
    EvidenceSource,
    FaultClass,
    RecoveryAction,
    SignalKind,
)
from resurrect.contracts.policy import (
    JobPolicy,
    LemonAction,
    ProgressPolicy,
    RecoveryMode,
)
from resurrect.contracts.recovery import (
    AttemptRecord,
    CheckpointCandidate,
    CheckpointVerdict,
    Interruption,
    OutputMark,
    RecoveryContext,
    RecoveryDecision,
    RecoveryOutcome,
    RecoveryOutcomeKind,
    RecoveryPhase,
    RecoveryState,
    RestartHistory,
    StepInput,
    StepResult,
    restart_charged,
    step_phase,
)
from resurrect.contracts.scheduler import (
    ACTIVE_JOB_STATES,
    FAILED_JOB_STATES,
    FINISHED_JOB_STATES,
    HARD_DOWN_NODE_STATES,
    NOT_RESPONDING_GRACE_S,
    RUNNING_JOB_STATES,
    JobInfo,
    JobState,
    MutationResult,
    NodeInfo,
)

__all__ = [
    "ACTIVE_JOB_STATES",
    "DEFAULT_ACTION",
    "FAILED_JOB_STATES",
    "FINISHED_JOB_STATES",
    "HARD_DOWN_NODE_STATES",
    "NOT_RESPONDING_GRACE_S",
    "RUNNING_JOB_STATES",
    "AttemptRecord",
    "CheckpointCandidate",
    "CheckpointVerdict",
    "Contract",
    "Diagnosis",
    "Evidence",
    "EvidenceRole",
    "EvidenceSource",
    "FaultClass",
    "Interruption",
    "JobInfo",
    "JobPolicy",
    "JobState",
    "LemonAction",
    "MutationResult",
    "NodeInfo",
    "OutputMark",
    "ProgressPolicy",
    "RecoveryAction",
    "RecoveryContext",
    "RecoveryDecision",
    "RecoveryMode",
    "RecoveryOutcome",
    "RecoveryOutcomeKind",
    "RecoveryPhase",
    "RecoveryState",
    "RestartHistory",
    "SignalKind",
    "StepInput",
    "StepResult",
    "restart_charged",
    "step_phase",
]
