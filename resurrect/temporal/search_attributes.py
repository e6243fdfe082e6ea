"""The search attributes resurrect sets on its workflows, so people can filter recoveries
in the Temporal UI (e.g. ``ResurrectJobId = "1234"`` or ``ResurrectFaultClass = "gpu.hardware"``).

The embedded dev server registers them at start; on an existing cluster an operator registers
them once (``resurrect temporal register-search-attributes``; ``--print``: the Temporal CLI
commands), and a worker does not start while one is missing.
A workflow sets them through :class:`SearchAttributeBatch`, one upsert per workflow task.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)

from resurrect.contracts import Interruption, RecoveryPhase

JOB_ID = SearchAttributeKey.for_keyword("ResurrectJobId")
CLUSTER = SearchAttributeKey.for_keyword("ResurrectCluster")
FAULT_CLASS = SearchAttributeKey.for_keyword("ResurrectFaultClass")
NODES = SearchAttributeKey.for_keyword_list("ResurrectNodes")
PHASE = SearchAttributeKey.for_keyword("ResurrectPhase")
OUTCOME = SearchAttributeKey.for_keyword("ResurrectOutcome")
BUDGET_CHARGED = SearchAttributeKey.for_bool("ResurrectBudgetCharged")
# The last training step the interrupted attempt printed, and the checkpoint step the job was
# set to resume from: what later recoveries of the job read to tell a restart loop.
LAST_STEP = SearchAttributeKey.for_int("ResurrectLastStep")
RESUME_STEP = SearchAttributeKey.for_int("ResurrectResumeStep")
# Which incarnation of the job id a recovery was of (resurrect/job_incarnation.py): later
# recoveries of the id count only their own job's restarts.
INCARNATION = SearchAttributeKey.for_keyword("ResurrectIncarnation")
# On a node's repair workflow: its lemon score as of its latest incident (resurrect/lemons).
LEMON_SCORE = SearchAttributeKey.for_float("ResurrectLemonScore")

ALL_KEYS: tuple[SearchAttributeKey[Any], ...] = (
    JOB_ID,
    CLUSTER,
    FAULT_CLASS,
    NODES,
    PHASE,
    OUTCOME,
    BUDGET_CHARGED,
    LAST_STEP,
    RESUME_STEP,
    INCARNATION,
    LEMON_SCORE,
)

# `temporal server start-dev --search-attribute NAME=TYPE` spelling of each key.
DEV_SERVER_TYPES: dict[str, str] = {
    "ResurrectJobId": "Keyword",
    "ResurrectCluster": "Keyword",
    "ResurrectFaultClass": "Keyword",
    "ResurrectNodes": "KeywordList",
    "ResurrectPhase": "Keyword",
    "ResurrectOutcome": "Keyword",
    "ResurrectBudgetCharged": "Bool",
    "ResurrectLastStep": "Int",
    "ResurrectResumeStep": "Int",
    "ResurrectIncarnation": "Keyword",
    "ResurrectLemonScore": "Double",
}


def initial_attributes(interruption: Interruption) -> TypedSearchAttributes:
    """What a recovery is searchable by from the moment it starts."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(JOB_ID, interruption.job_id),
            SearchAttributePair(CLUSTER, interruption.cluster),
            SearchAttributePair(NODES, sorted(set(interruption.nodes))),
            SearchAttributePair(PHASE, RecoveryPhase.REPORTED.value),
        ]
    )


class SearchAttributeBatch:
    """The search attributes a workflow has set and not yet upserted: upserted together, one
    upsert command per workflow task at most, and only those whose value changed."""

    def __init__(self) -> None:
        self._pending: dict[str, SearchAttributeUpdate[Any]] = {}
        self._upserted: dict[str, object] = {}

    def begin(self) -> None:
        """Take the attributes the workflow was started with as already upserted."""
        started = workflow.info().typed_search_attributes
        self._upserted = {pair.key.name: pair.value for pair in started}

    def set(self, key: SearchAttributeKey[Any], value: object) -> None:
        """Set ``key`` at the next :meth:`publish` (forgotten if it is set back first)."""
        if self._upserted.get(key.name) == value:
            self._pending.pop(key.name, None)
        else:
            self._pending[key.name] = key.value_set(value)

    def publish(self) -> None:
        """Upsert the attributes that changed since the last upsert, in one command."""
        if not self._pending:
            return
        updates = list(self._pending.values())
        for update in updates:
            self._upserted[update.key.name] = update.value
        self._pending.clear()
        workflow.upsert_search_attributes(updates)
