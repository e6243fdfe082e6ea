"""Names by which workflows, signals, queries and activities are called.

Workflows call activities by name (never by importing their code), so activities can live
in another process, and a plugin can replace one by registering the same name.
"""

RECOVERY_WORKFLOW = "RecoveryWorkflow"
REPORT_SIGNAL = "report"
PHASE_QUERY = "phase"
STATUS_QUERY = "status"


class Activity:
    """Activity names of the built-in recovery steps."""

    GATHER_EVIDENCE = "recovery.gather_evidence"
    ATTRIBUTE = "recovery.attribute"
    CHARGED_RESTARTS = "recovery.charged_restarts"
    DRAIN_NODES = "recovery.drain_nodes"
    VERIFY_CHECKPOINT = "recovery.verify_checkpoint"
    REQUEUE_JOB = "recovery.requeue_job"
    WAIT_RUNNING = "recovery.wait_running"
    NOTIFY = "recovery.notify"
