"""What a job's earlier recoveries recorded, read for the recovery of its next attempt: the
job's incarnation, the attempts they ended and the restarts charged to its budget, from
Temporal's visibility (one list, one count), never from the job."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from temporalio.client import Client, WorkflowExecution
from temporalio.exceptions import ApplicationError

from resurrect.contracts import AttemptRecord, FaultClass, RecoveryContext
from resurrect.contracts.workflow_names import RECOVERY_WORKFLOW
from resurrect.job_incarnation import Incarnation, incarnation_of, split_by_incarnation
from resurrect.numbers import is_ascii_digits
from resurrect.temporal import search_attributes as sa

SAFE_ID_CHARS = frozenset("0123456789_")
# How many of a job's earlier recoveries are read for its restart history (rules 9 and 10).
EARLIER_ATTEMPTS_READ = 64
REQUEUED_OUTCOMES = frozenset({"recovered", "requeued_not_running"})


@dataclass
class EarlierRecoveries:
    """What the job's earlier recoveries recorded: the job's incarnation, the attempts they
    ended (oldest first) and the restarts charged to its budget."""

    incarnation: Incarnation
    attempts: list[AttemptRecord] = field(default_factory=list)
    charged: int = 0
    # attempts of which only recoveries of other jobs that had the id were read
    others: set[int] = field(default_factory=set)
    # nodes an earlier attempt lost, as its recovery recorded them (:func:`lost_nodes`)
    lost_nodes: frozenset[str] = frozenset()

    def another_jobs(self, restart_count: int) -> bool:
        """Whether the recovery of attempt ``restart_count`` read was another job's only."""
        return restart_count in self.others and all(
            a.restart_count != restart_count for a in self.attempts
        )


async def read_earlier_recoveries(
    client: Client | None, bundle: RecoveryContext, current_workflow_id: str
) -> EarlierRecoveries:
    """The incarnation of the job (:mod:`resurrect.job_incarnation`), what its earlier
    recoveries recorded of the attempts they ended (the newest ``EARLIER_ATTEMPTS_READ``
    of the job id, oldest first) and how many of them were charged to its budget: one
    visibility list, then one count of this incarnation's charged recoveries."""
    report = bundle.interruption
    if client is None:
        return EarlierRecoveries(incarnation_of(bundle.job, ()))
    query = earlier_recoveries(report.cluster, report.job_id, current_workflow_id)
    found = [f async for f in client.list_workflows(query, limit=EARLIER_ATTEMPTS_READ)]
    split = split_by_incarnation(bundle.job, found)
    incarnation = split.incarnation
    records: dict[int, AttemptRecord] = {}
    for record in filter(None, map(attempt_record, split.own)):
        records.setdefault(record.restart_count, record)  # the newest run of that recovery
    others = {r.restart_count for r in filter(None, map(attempt_record, split.others))}
    count = await client.count_workflows(
        f"{query} AND {of_incarnation(incarnation)} AND ResurrectBudgetCharged = true"
    )
    return EarlierRecoveries(
        incarnation,
        [records[n] for n in sorted(records)],
        int(count.count),
        others,
        lost_nodes(split.own),
    )


def earlier_recoveries(cluster: str, job_id: str, current_workflow_id: str) -> str:
    """The visibility query of the job's recoveries other than ``current_workflow_id``."""
    if not set(job_id) <= SAFE_ID_CHARS:
        raise ApplicationError(f"bad job id {job_id!r}", non_retryable=True)
    return (
        f"WorkflowType = '{RECOVERY_WORKFLOW}' AND ResurrectCluster = '{cluster}'"
        f" AND ResurrectJobId = '{job_id}' AND WorkflowId != '{current_workflow_id}'"
    )


def of_incarnation(incarnation: Incarnation) -> str:
    """The visibility filter of the recoveries of ``incarnation``, and of those recorded
    before recoveries named theirs (:func:`resurrect.job_incarnation.same_job`)."""
    key = sa.INCARNATION.name
    return f"({key} = '{incarnation.key}' OR {key} IS NULL)"


def free_restarts(attempts: Sequence[AttemptRecord]) -> int:
    """The free restarts among the job's earlier recoveries (requeued, not charged)."""
    return sum(1 for a in attempts if a.requeued and not a.charged)


def lost_nodes(executions: Sequence[WorkflowExecution]) -> frozenset[str]:
    """The nodes of the attempts whose recovery found them lost: class ``node.lost``, the job
    requeued, the restart not charged (so a node agent or Slurm confirmed the loss, not the
    job's output alone: :func:`resurrect.plans.decide.decide`'s charging rule)."""
    found: set[str] = set()
    for execution in executions:
        attributes = execution.typed_search_attributes
        if (
            attributes.get(sa.FAULT_CLASS) == FaultClass.NODE_LOST.value
            and attributes.get(sa.OUTCOME) in REQUEUED_OUTCOMES
            and not attributes.get(sa.BUDGET_CHARGED)
        ):
            found.update(attributes.get(sa.NODES) or ())
    return frozenset(found)


def attempt_record(execution: WorkflowExecution) -> AttemptRecord | None:
    """What one earlier recovery recorded of its attempt; None for an id not of a recovery."""
    _, _, tail = execution.id.rpartition("/")
    if not is_ascii_digits(tail):
        return None
    attributes = execution.typed_search_attributes
    outcome = attributes.get(sa.OUTCOME)
    return AttemptRecord(
        restart_count=int(tail),
        outcome=outcome,
        requeued=outcome in REQUEUED_OUTCOMES,
        charged=bool(attributes.get(sa.BUDGET_CHARGED)),
        last_step=attributes.get(sa.LAST_STEP),
        resume_step=attributes.get(sa.RESUME_STEP),
        closed_at=execution.close_time,
    )
