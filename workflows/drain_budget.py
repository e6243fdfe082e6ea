"""DrainBudgetWorkflow: one per cluster, the circuit breaker of node drains.

Every drain step asks it first with a Temporal Update (workflow id ``drain-budget/<cluster>``,
started on first use); a worker sends the reservations in flight together, in one
``reserve_drains_census``: they count the nodes resurrect keeps out (the census of held
nodes) as the budget keeps it, the census sent once per read of it, not with every
reservation. ``reserve_drains`` (each reservation carrying its census) is what 0.2 workers
send, still served. The handler is synchronous: Temporal runs
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
    from temporalio.exceptions import ApplicationError

    from resurrect.contracts.workflow_names import (
        BUDGET_QUERY,
        CENSUS_NOT_KEPT,
        DRAIN_BUDGET_WORKFLOW,
        RESERVE_DRAINS_CENSUS_UPDATE,
        RESERVE_DRAINS_UPDATE,
        OperatorActivity,
    )
    from resurrect.operator.budget import grant_drains, in_window
    from resurrect.operator.models import (
        BudgetState,
        BudgetTripNotice,
        CensusReservations,
        DrainCandidate,
        DrainGrant,
        DrainReservation,
        HeldCensus,
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
        # The newest census of held nodes a sender gave this run (not carried over continue
        # as new: the next sender is refused until it sends its census again).
        self._census: HeldCensus | None = None

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
        return [self._reserve(request, request.held) for request in requests]

    @workflow.update(name=RESERVE_DRAINS_CENSUS_UPDATE)
    def reserve_drains_census(self, batch: CensusReservations) -> list[DrainGrant]:
        """Several reservations, decided in order against the newest census of held nodes
        this run was given (the batch's own when it carries a newer one): a reservation no
        longer carries every node resurrect keeps out."""
        if batch.held is not None and (
            self._census is None or batch.census_at > self._census.read_at
        ):
            self._census = HeldCensus(read_at=batch.census_at, nodes=batch.held)
        held = self._census.nodes if self._census is not None else []
        return [self._reserve(request, held) for request in batch.requests]

    @reserve_drains_census.validator
    def _census_kept(self, batch: CensusReservations) -> None:
        """Refuse (before anything is recorded) a batch without its census when this run
        keeps none as new: the sender sends it again with its census."""
        if batch.held is None and (self._census is None or self._census.read_at < batch.census_at):
            raise ApplicationError(
                f"no census of held nodes of {batch.census_at.isoformat()} kept",
                type=CENSUS_NOT_KEPT,
                non_retryable=True,
            )

    def _reserve(self, request: DrainReservation, held: list[DrainCandidate]) -> DrainGrant:
        self._state, grant = grant_drains(self._state, request, workflow.now(), held)
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
