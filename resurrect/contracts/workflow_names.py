"""Names by which workflows, signals, queries and activities are called.

Workflows call activities by name (never by importing their code), so activities can live
in another process, and plugins add steps under their own namespace. Workflow ids are built
in :mod:`resurrect.contracts.workflow_ids`.
"""

RECOVERY_WORKFLOW = "RecoveryWorkflow"
REPORT_SIGNAL = "report"
PHASE_QUERY = "phase"
STATUS_QUERY = "status"


class Activity:
    """The fixed activities every recovery runs before its plan's steps.

    The built-in plan steps (``recovery.drain_nodes``, ``recovery.verify_checkpoint``,
    ``recovery.requeue_job``, ``recovery.wait_running``, ``recovery.notify``,
    ``recovery.run_program``) are named in the plan files.
    """

    GATHER_EVIDENCE = "recovery.gather_evidence"
    # attribution and every other input of the decision, in one activity
    ASSESS = "recovery.assess"


# ---------------------------------------------------------------------------- operator control
# The per-cluster drain budget (circuit breaker).
DRAIN_BUDGET_WORKFLOW = "DrainBudgetWorkflow"
# Several recoveries' reservations in one update (a worker batches those in flight together).
RESERVE_DRAINS_UPDATE = "reserve_drains"
# The same, decided against the census of held nodes the budget keeps (sent once per census).
RESERVE_DRAINS_CENSUS_UPDATE = "reserve_drains_census"
# Why the budget refuses such an update: it does not keep the sender's census (send it).
CENSUS_NOT_KEPT = "CensusNotKept"
BUDGET_QUERY = "budget"
# Approvals of a recovery (Temporal Updates carrying who and why).
APPROVE_UPDATE = "approve"
DENY_UPDATE = "deny"
# One repair workflow per node resurrect drained.
NODE_REPAIR_WORKFLOW = "NodeRepairWorkflow"
NODE_DRAINED_SIGNAL = "node_drained"
# A recovery implicated the node: an incident of its lemon record.
NODE_INCIDENT_SIGNAL = "node_incident"
NODE_STATE_QUERY = "node_state"


class OperatorActivity:
    """Activities of the operator-control workflows."""

    NOTIFY = "operator.notify"
    CHECK_NODE = "repair.check_node"
    RESUME_NODE = "repair.resume_node"
    FLAG_NODE = "repair.flag_node"
