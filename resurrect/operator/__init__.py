"""Operator control: the drain budget (circuit breaker), approvals, return to service of
drained nodes, exclusions that do not pile up, and the fail-open hold watchdog.

The modules here are pure decisions and contracts; the Temporal side lives in
``workflows/drain_budget.py``, ``workflows/node_repair.py`` and ``activities/operator.py``.
"""
