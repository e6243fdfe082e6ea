"""DrainBudgetWorkflow: one per cluster, the circuit breaker of node drains.

Every drain step asks it first with the Temporal Update ``reserve_drain`` (workflow id
``drain-budget/<cluster>``, started on first use); a worker sends the reservations in flight
together, in one ``reserve_drains``. The handler is synchronous: Temporal runs
updates of one workflow one at a time, so reservations from concurrent recoveries, on any
number of workers, are decided one after another against the same durable record of drains
in the sliding window (:func:`resurrect.operator.budget.grant_drains`). The first denial after the
budget had room is a *trip*: the workflow notifies operators once for it (not once per job).
The query ``budget`` returns the state; ``resurrect budget`` shows it. The workflow runs for
ever, continuing as new (with its records) when its history grows.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from resurrect.contracts.workflow_names import (
        BUDGET_QUERY,
        DRAIN_BUDGET_WORKFLOW,
        RESERVE_DRAINS_UPDATE,
        OperatorActivity,
    )
    from resurrect.operator.budget import grant_drains, in_window
    from resurrect.operator.models import (
        BudgetState,
        BudgetTripNotice,
        DrainGrant,
        DrainReservation,
    )
    from resurrect.workflows.retry import UNTIL_DONE_RETRY

# Continue as new after this many reservations (or when Temporal suggests it).
RESERVATIONS_PER_RUN = 500


@workflow.defn(name=DRAIN_BUDGET_WORKFLOW)
class DrainBudgetWorkflow:
    @workflow.init
    def __init__(self, state: BudgetState) -> None:
        self._state = state
        self._notices: list[BudgetTripNotice] = []
        self._reservations = 0

    @workflow.run
    async def run(self, state: BudgetState) -> None:
        while True:
            await workflow.wait_condition(
                lambda: (
                    bool(self._notices)
                    or self._reservations >= RESERVATIONS_PER_RUN
                    or workflow.info().is_continue_as_new_suggested()
                )
            )
            while self._notices:
                notice = self._notices.pop(0)
                await workflow.execute_activity(
                    OperatorActivity.NOTIFY,
                    notice,
                    start_to_close_timeout=timedelta(seconds=30),
                    schedule_to_close_timeout=timedelta(hours=1),
                    retry_policy=UNTIL_DONE_RETRY,
                )
            if (
                self._reservations >= RESERVATIONS_PER_RUN
                or workflow.info().is_continue_as_new_suggested()
            ):
                await workflow.wait_condition(workflow.all_handlers_finished)
                if self._notices:
                    continue  # a trip decided meanwhile: notify first
                workflow.continue_as_new(self._compact())

    def _compact(self) -> BudgetState:
        state = self._state
        if state.limits is None:
            return state
        kept = in_window(state.records, workflow.now(), state.limits.window_s)
        return state.model_copy(update={"records": kept})

    @workflow.update(name=RESERVE_DRAINS_UPDATE)
    def reserve_drains(self, requests: list[DrainReservation]) -> list[DrainGrant]:
        """Several reservations, decided in order as if each were its own update (a burst of
        recoveries costs one update per batch instead of one per recovery)."""
        return [self._reserve(request) for request in requests]

    def _reserve(self, request: DrainReservation) -> DrainGrant:
        self._state, grant = grant_drains(self._state, request, workflow.now())
        self._reservations += 1
        if grant.tripped:
            self._notices.append(
                BudgetTripNotice(
                    cluster=self._state.cluster,
                    trip=self._state.trips,
                    at=workflow.now(),
                    workflow_id=request.workflow_id,
                    job_id=request.job_id,
                    denied=grant.denied,
                    reasons=grant.reasons,
                )
            )
        return grant

    @workflow.query(name=BUDGET_QUERY)
    def budget(self) -> BudgetState:
        return self._state
