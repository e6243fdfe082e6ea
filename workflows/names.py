"""Names by which workflows, signals, queries and activities are called.

Workflows call activities by name (never by importing their code), so activities can live
in another process, and plugins add steps under their own namespace.
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
    ATTRIBUTE = "recovery.attribute"
    CHARGED_RESTARTS = "recovery.charged_restarts"
    RECOVERY_PLANS = "recovery.plans"
