"""Every workflow id resurrect starts or signals, built here and nowhere else.

A workflow id is an identity: Temporal runs one workflow per id at a time, so each id says
what there is one of (a recovery per job attempt, a health workflow per node, ...). Sensors,
activities, the operator CLI and tests all reach a workflow through these functions.
"""

from __future__ import annotations


def recovery_workflow_id(cluster: str, job_id: str, restart_count: int) -> str:
    """One recovery per (cluster, job, attempt)."""
    return f"recover/{cluster}/{job_id}/{restart_count}"


def node_health_workflow_id(cluster: str, node: str) -> str:
    """One health workflow per (cluster, node)."""
    return f"node-health/{cluster}/{node}"


def node_repair_workflow_id(cluster: str, node: str) -> str:
    """One repair workflow per node resurrect drained, per (cluster, node)."""
    return f"node-repair/{cluster}/{node}"


def drain_budget_workflow_id(cluster: str) -> str:
    """One drain budget (circuit breaker) per cluster."""
    return f"drain-budget/{cluster}"


def stack_probe_workflow_id(
    cluster: str, job_id: str, restart_count: int | None, node: str, number: int
) -> str:
    """One stack probe per (job attempt, node, probe round); an asker that does not know the
    attempt (``restart_count`` None) probes ``any``."""
    attempt = "any" if restart_count is None else restart_count
    return f"stack-probe/{cluster}/{job_id}/{attempt}/{node}/{number}"
