"""The activities every recovery runs before its plan: evidence, attribution, budget, plans.

A recovery gathers evidence (``gather_evidence``, a local activity: a few scheduler reads),
then assesses it in one activity (``assess``: the diagnosis, the restart budget used, the
plans and the approval settings), tried first as a local activity of a few seconds
(``AssessRequest.quick_s``) that gives up with :class:`NeedsMoreTime` when it would have to
wait (for the job's output files, a node agent, its confirmation), then as an activity task.

They are methods of :class:`RecoveryActivities`, which holds their dependencies (the
scheduler, the configuration, the rule engine, a Temporal client, the checked plans), so
tests can build one with a fake scheduler and call the methods directly. None of them
changes the cluster or the job (the plan steps that do live in :mod:`activities.steps`);
``assess`` records the recovery's incidents in the implicated nodes' lemon records (once
per recovery and node, however often it runs: docs/lemon-nodes.md).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowContinuedAsNewError,
    WorkflowFailureError,
)
from temporalio.service import RPCError

from resurrect.activities.agent_health import WATCHING_STATUSES, agent_health
from resurrect.activities.attempt_lines import attempt_end_state, this_attempts
from resurrect.activities.earlier_recoveries import (
    EarlierRecoveries,
    free_restarts,
    read_earlier_recoveries,
)
from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    Diagnosis,
    Evidence,
    Interruption,
    JobInfo,
    OutputMark,
    RecoveryContext,
    RecoveryOutcome,
    RestartHistory,
    SignalKind,
)
from resurrect.contracts.assessment import Assessment, AssessRequest
from resurrect.contracts.node_health import NodeHealth
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.contracts.workflow_names import Activity
from resurrect.errors import JobNotFound, NeedsMoreTime, failure_of
from resurrect.evidence_trust import (
    INDEPENDENT_SOURCES,
    NODE_CLASSES,
    evidence_source,
    independent_evidence,
    match_job_nodes,
)
from resurrect.job_incarnation import incarnation_of
from resurrect.lemons.board import BoardRead, board_for
from resurrect.lemons.incidents import node_incidents
from resurrect.lemons.models import LemonScore
from resurrect.lemons.records import (
    compact,
    known_to_slurm,
    lemon_rules,
    lemons_enabled,
    report_incidents,
    score_records,
)
from resurrect.log_reading import AttemptOutput, Budget, attempt_output, read_tail
from resurrect.plans.decide import decide_assessed, plans_looked_up, restart_loop
from resurrect.plans.models import ResolvedPlan
from resurrect.policy import resolve_job_policy
from resurrect.progress.parser import shipped_parser
from resurrect.rules import RuleEngine
from resurrect.rules import attribute as attribute_evidence
from resurrect.rules.scheduler_evidence import (
    cancel_claims_checked,
    combine,
    scheduler_diagnosis,
    scheduler_evidence,
)
from resurrect.scheduler.base import Scheduler

log = logging.getLogger(__name__)

ResultT = TypeVar("ResultT")
# Reading the job's output files in ``assess``: heartbeat this often, give up after this.
HEARTBEAT_EVERY_S = 2.0
LOG_READ_BUDGET_S = 20.0
# Node agent findings older than this (or older than the job attempt) say nothing about it.
AGENT_FINDING_MAX_AGE = timedelta(minutes=10)
# How long the outcome of the attempt before's recovery (where this attempt's output begins)
# is waited for: it ends once the requeued job runs, about when this attempt starts.
EARLIER_OUTCOME_WAIT_S = 10.0
CORROBORATION_POLL_S = 0.5
# Before this process's first read of the lemon records has ended (the worker starts it), a
# recovery waits for it this long at most (its quick attempt: as long as that may take), then
# goes on without them; afterwards it reads the kept copy at once.
LEMON_FIRST_READ_WAIT_S = 20.0


@dataclass
class OutputReading:
    """What the tail of a job's output said: rule matches, the last training step printed,
    and notes on what could not be read."""

    found: list[Evidence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    last_step: int | None = None


class RecoveryActivities:
    """The recovery steps, bound to one scheduler and configuration; ``engine`` holds the
    rule packs the job's output is read with (loaded once, when the worker starts)."""

    def __init__(
        self,
        scheduler: Scheduler,
        config: ResurrectConfig,
        engine: RuleEngine,
        client: Client | None = None,
        plans: Sequence[ResolvedPlan] = (),
        quick_steps: Sequence[str] = (),
    ) -> None:
        self.scheduler = scheduler
        self.config = config
        self.client = client
        self.plans = list(plans)
        self.quick_steps = sorted(quick_steps)
        self.engine = engine

    def all(self) -> list[Callable[..., Any]]:
        """Every activity of this object, for Worker(activities=...)."""
        return [self.gather_evidence, self.assess]

    # ------------------------------------------------------------------ evidence
    @activity.defn(name=Activity.GATHER_EVIDENCE)
    async def gather_evidence(self, interruption: Interruption) -> RecoveryContext:
        try:
            job = as_interrupted(await self.scheduler.get_job(interruption.job_id), interruption)
        except JobNotFound as exc:
            raise failure_of(exc) from exc
        nodes = await self.scheduler.list_nodes_named(set(job.nodes) | set(interruption.nodes))
        resolution = resolve_job_policy(job, self.config)
        for problem in resolution.problems:
            log.warning("%s", problem)
        mode = resolution.policy.mode or self.config.mode
        return RecoveryContext(
            interruption=interruption,
            job=job,
            nodes=nodes,
            policy=resolution.policy,
            policy_source=resolution.source,
            policy_problems=resolution.problems,
            mode=mode,
            opted_in=resolution.opted_in,
            wait_running_timeout_s=self.config.recovery.wait_running_timeout_s,
            activity_timeout_s=self.config.recovery.activity_timeout_s,
            checkpoint_level=self.config.recovery.checkpoint_level,
            not_responding_grace_s=self.config.watcher.not_responding_grace_s,
        )

    def _log_evidence(
        self, job: JobInfo, budget: Budget, attempt: AttemptOutput | None = None
    ) -> OutputReading:
        """Rule matches in the tail of the interrupted attempt's output (nothing before
        where ``attempt`` says it begins in each file), the last training step it printed,
        and notes on files that were not read (not regular files, not the owner's, out of
        time) or whose attempt start is not known."""
        progress = shipped_parser()
        attempt = attempt or AttemptOutput()
        reading = OutputReading(notes=list(attempt.notes))
        for path in output_paths(job):
            tail = read_tail(
                path,
                self.config.watcher.log_tail_bytes,
                owner_uid=job.user_id,
                budget=budget,
                begin=attempt.begins.get(path),
            )
            if tail.note:
                reading.notes.append(tail.note)
            for number, line in tail.lines:
                if budget.spent():
                    break
                reading.found.extend(
                    self.engine.scan_line(line, kind=SignalKind.JOB_LOG, file=path, line=number)
                )
                event = progress.parse(line)
                if event is not None and event.step is not None and event.rank in (None, 0):
                    reading.last_step = max(reading.last_step or 0, event.step)
        return reading

    async def _read_job_output(
        self, job: JobInfo, quick_s: float | None = None, attempt: AttemptOutput | None = None
    ) -> OutputReading:
        """:meth:`_log_evidence` in a thread, heartbeating while it runs, given up (the
        thread told to stop) after ``LOG_READ_BUDGET_S`` or when the activity is cancelled;
        with ``quick_s``, NeedsMoreTime once that is spent (the task attempt reads it all)."""
        seconds = LOG_READ_BUDGET_S if quick_s is None else min(quick_s, LOG_READ_BUDGET_S)
        budget = Budget(deadline=time.monotonic() + seconds, stop=threading.Event())
        reading = asyncio.ensure_future(asyncio.to_thread(self._log_evidence, job, budget, attempt))
        try:
            while True:
                done, _ = await asyncio.wait({reading}, timeout=HEARTBEAT_EVERY_S)
                if done:
                    return reading.result()
                if activity.in_activity():
                    activity.heartbeat("reading job output")
                if budget.spent():
                    if quick_s is not None:
                        raise NeedsMoreTime(f"job output not read within {seconds:g} s")
                    skipped = f"job output not read within {LOG_READ_BUDGET_S:g} s: skipped"
                    return OutputReading(notes=[skipped])
        finally:
            assert budget.stop is not None
            budget.stop.set()  # a thread still reading stops at its next chunk

    async def _attempt_output(
        self, bundle: RecoveryContext, earlier: EarlierRecoveries | None = None
    ) -> AttemptOutput:
        """Where the interrupted attempt's output begins in each file
        (:func:`resurrect.log_reading.attempt_output`); not from the recovery of the attempt
        before when ``earlier`` shows that recovery was of another job that had the id."""
        report = bundle.interruption
        if report.restart_count == 0:
            return AttemptOutput()
        before = report.restart_count - 1
        if earlier is not None and earlier.another_jobs(before):
            recorded: list[OutputMark] | None = None
            why = f"{recovery_workflow_id(report.cluster, report.job_id, before)} is another job's"
        else:
            recorded, why = await self._recorded_output_start(
                report.cluster, report.job_id, report.restart_count
            )
        return attempt_output(
            report.restart_count, output_paths(bundle.job), recorded, report.output_marks, why
        )

    async def _recorded_output_start(
        self, cluster: str, job_id: str, restart_count: int
    ) -> tuple[list[OutputMark] | None, str]:
        """Where attempt ``restart_count`` began in the job's files, as the recovery of the
        attempt before recorded it when it requeued the job; None (and why) when unknown."""
        if self.client is None:
            return None, "no Temporal client to read the earlier recovery"
        earlier = recovery_workflow_id(cluster, job_id, restart_count - 1)
        handle = self.client.get_workflow_handle(earlier, result_type=RecoveryOutcome)
        try:
            outcome = await asyncio.wait_for(
                handle.result(follow_runs=False), EARLIER_OUTCOME_WAIT_S
            )
        except TimeoutError:
            return None, f"{earlier} did not end within {EARLIER_OUTCOME_WAIT_S:g} s"
        except (RPCError, WorkflowFailureError, WorkflowContinuedAsNewError):
            return None, f"no outcome of {earlier} to read"
        return list(outcome.next_attempt_output), ""

    async def _agent_health(self, cluster: str, node: str) -> NodeHealth | None:
        """What the node agent of ``node`` reported (its NodeHealthWorkflow), if it runs."""
        assert self.client is not None
        return await agent_health(self.client, cluster, node)

    async def _agent_evidence(self, bundle: RecoveryContext) -> tuple[list[Evidence], list[str]]:
        """Root findings of the job's nodes' agents during this job attempt, and the nodes
        whose agent is watching (heartbeating) now."""
        if self.client is None:
            return [], []
        since = datetime.now(UTC) - AGENT_FINDING_MAX_AGE
        if bundle.job.start_time is not None:
            started = bundle.job.start_time
            started = started if started.tzinfo else started.replace(tzinfo=UTC)
            since = max(since, started)
        nodes = list(dict.fromkeys([*bundle.job.nodes, *bundle.interruption.nodes]))
        healths = await asyncio.gather(
            *[self._agent_health(bundle.interruption.cluster, n) for n in nodes]
        )
        found: list[Evidence] = []
        watching: list[str] = []
        for node, health in zip(nodes, healths, strict=True):
            if health is None:
                continue
            if health.status in WATCHING_STATUSES:
                watching.append(node)
            found.extend(
                # the agent vouches for its own readings, not for what it read from a job
                item.model_copy(
                    update={"host": item.host or node, "source": item.source or "node_agent"}
                )
                for item in health.findings
                if item.role == "root" and (item.observed_at is None or item.observed_at >= since)
            )
        return found, watching

    def _diagnose(self, bundle: RecoveryContext, found: list[Evidence]) -> Diagnosis:
        found = cancel_claims_checked(found, attempt_end_state(bundle))
        log_diagnosis = attribute_evidence(found) if found else None
        sched = scheduler_diagnosis(
            scheduler_evidence(
                bundle.interruption, bundle.job, bundle.nodes, bundle.lasting_unavailable
            )
        )
        return _keeping_independent(combine(log_diagnosis, sched), found)

    async def read_and_attribute(
        self,
        bundle: RecoveryContext,
        reported: Sequence[Evidence] = (),
        quick_s: float | None = None,
        earlier: EarlierRecoveries | None = None,
    ) -> tuple[Diagnosis, int | None]:
        """One diagnosis from the job's output, other sensors' reports (``reported``), the
        node agents' findings and the scheduler's states.

        A hardware diagnosis that rests on the job's output alone waits up to
        ``recovery.corroboration_wait_s`` for the agent of an implicated node that is
        watching (a real GPU or link failure reaches its kernel log or NVML within its
        interval); planning drains only what a second source confirms. With ``quick_s``
        (assess's first attempt) it raises NeedsMoreTime instead of waiting for the job's
        output or a node agent's confirmation. Also returns the last training step the
        output printed (rank 0's, or an unranked line's), None when none. ``earlier``: the
        job's earlier recoveries, when read (:meth:`read_earlier_recoveries`).
        """
        attempt = await self._attempt_output(bundle, earlier)
        output = await self._read_job_output(bundle.job, quick_s, attempt)
        found, earlier_lines = this_attempts(output.found, bundle, earlier)
        notes = [*output.notes, earlier_lines] if earlier_lines else output.notes
        found.extend(e for e in reported if e.kind is not SignalKind.SCHEDULER_STATE)
        agent_found, watching = await self._agent_evidence(bundle)
        found.extend(e for e in agent_found if e not in found)
        diagnosis = self._diagnose(bundle, found)
        if quick_s is not None and _awaits_second_opinion(diagnosis, bundle.job.nodes, watching):
            raise NeedsMoreTime("the diagnosis waits for a node agent's confirmation")
        deadline = asyncio.get_running_loop().time() + self.config.recovery.corroboration_wait_s
        while (
            _awaits_second_opinion(diagnosis, bundle.job.nodes, watching)
            and asyncio.get_running_loop().time() < deadline
        ):
            if activity.in_activity():
                activity.heartbeat("waiting for the node agent to confirm")
            await asyncio.sleep(CORROBORATION_POLL_S)
            agent_found, watching = await self._agent_evidence(bundle)
            fresh = [e for e in agent_found if e not in found]
            if fresh:
                found.extend(fresh)
                diagnosis = self._diagnose(bundle, found)
        notes = [*bundle.job.notes, *notes]
        if notes:  # what could not be read is part of what the diagnosis rests on
            summary = (
                "; ".join([diagnosis.summary, *notes]) if diagnosis.summary else "; ".join(notes)
            )
            diagnosis = diagnosis.model_copy(update={"summary": summary[:2000]})
        return diagnosis, output.last_step

    @activity.defn(name=Activity.ASSESS)
    async def assess(self, request: AssessRequest) -> Assessment:
        """The diagnosis (:meth:`read_and_attribute`) and every other input of the decision: the
        restarts already charged to the job's budget, the plans, the approval settings."""
        try:
            return await self._assess(request)
        except NeedsMoreTime as exc:
            raise failure_of(exc) from exc

    async def _assess(self, request: AssessRequest) -> Assessment:
        bundle = request.bundle
        report = bundle.interruption
        lemon_records = self._lemon_records(request.quick_s)
        # never requeued (restart count 0): no earlier recovery, none charged
        requeued_before = max(report.restart_count, bundle.job.restart_count) > 0
        earlier = asyncio.ensure_future(
            self.read_earlier_recoveries(bundle, request.workflow_id)
            if requeued_before
            else _nothing(EarlierRecoveries(incarnation_of(bundle.job, ())))
        )
        attributed = self._attribute_after(earlier, bundle, request)
        try:
            async with asyncio.timeout(request.quick_s):  # None: no limit of its own
                (diagnosis, last_step), recoveries, board = await asyncio.gather(
                    attributed, earlier, lemon_records
                )
                lemons = await self._lemons(request, diagnosis, board)
        except TimeoutError as exc:
            raise NeedsMoreTime(f"not assessed within {request.quick_s:g} s") from exc
        attempts = recoveries.attempts
        history = RestartHistory(
            last_step=last_step,
            earlier=attempts,
            read_at=datetime.now(UTC),
            progress_from_checkpoints=True,
            free_restarts=free_restarts(attempts),
        )
        if restart_loop(history, report.restart_count, bundle.policy) is not None:
            # only a newer checkpoint of this attempt that verifies can show progress now
            history.verified_step = await newest_verified_step(bundle, request.quick_s)
        assessment = Assessment(
            diagnosis=diagnosis,
            charged_restarts=recoveries.charged,
            plans=self.plans,
            approvals=self.config.approvals,
            quick_steps=self.quick_steps,
            history=history,
            lemons=lemons,
            incarnation=recoveries.incarnation.key,
        )
        # the recovery's history keeps only the plans its decision looks up
        choice = decide_assessed(bundle, assessment, request.reported)
        plans = plans_looked_up(assessment.plans, choice)  # the list the decision looked in
        steps = {step.activity for plan in plans for step in plan.steps}
        quick = [s for s in self.quick_steps if s in steps]
        return assessment.model_copy(update={"plans": plans, "quick_steps": quick})

    async def _attribute_after(
        self,
        earlier: asyncio.Future[EarlierRecoveries],
        bundle: RecoveryContext,
        request: AssessRequest,
    ) -> tuple[Diagnosis, int | None]:
        """:meth:`read_and_attribute`, once the earlier recoveries are read (whose record of
        where this attempt's output begins is this job's)."""
        recoveries = await earlier
        return await self.read_and_attribute(bundle, request.reported, request.quick_s, recoveries)

    async def _lemon_records(self, quick_s: float | None) -> BoardRead:
        """The lemon records of the cluster's scored nodes, as this process keeps them
        (:class:`~resurrect.lemons.board.LemonBoard`: no read of its own, so a recovery's
        cost does not grow with the scored nodes or the recoveries in flight). Empty when
        they are not kept, or not read yet: the recovery goes on without them, and says
        so. This recovery's own incidents are merged in by :meth:`_lemons`."""
        if self.client is None or not lemons_enabled(self.config):
            return BoardRead({})
        wait_s = LEMON_FIRST_READ_WAIT_S if quick_s is None else quick_s
        read = await board_for(self.client, self.config).records(wait_s)
        if read.note:
            log.warning("%s", read.note)
        return read

    async def _lemons(
        self,
        request: AssessRequest,
        diagnosis: Diagnosis,
        board: BoardRead,
    ) -> list[LemonScore]:
        """Record this recovery's incidents in the nodes' lemon records; the scores of the
        cluster's lemons and of the nodes implicated now, as the decision weighs them (only
        those nodes are scored: the board's candidates, never every scored node)."""
        bundle = request.bundle
        report = bundle.interruption
        incidents = node_incidents(
            incident=request.workflow_id,
            job_id=report.job_id,
            at=report.observed_at,
            diagnosis=diagnosis,
            job_nodes=bundle.job.nodes,
            nodes=bundle.nodes,
            lasting=bundle.lasting_unavailable,
            reported=request.reported,
            owner=None if bundle.job.user_id is None else str(bundle.job.user_id),
        )
        try:
            recorded = await report_incidents(self.client, self.config, incidents)
        except RPCError as exc:  # the record misses one incident; the recovery goes on
            log.warning("incidents of %s not recorded: %s", request.workflow_id, exc)
        else:
            if recorded and self.client is not None:
                board_for(self.client, self.config).note({n: incidents[n] for n in recorded})
        scored = {*board.candidates, *incidents}
        records = {n: board.records[n] for n in scored if n in board.records}
        scores = score_records(
            records, lemon_rules(self.config), datetime.now(UTC), adding=incidents
        )
        lemons = compact(scores, keep=incidents)
        if bundle.policy.lemon_action == "flag":
            return lemons
        # nodes excluded from a requeue must exist (a lemon may have left the cluster)
        elsewhere = [s.node for s in lemons if s.node not in bundle.job.nodes]
        existing = await self.scheduler.list_nodes_named(elsewhere) if elsewhere else []
        return known_to_slurm(lemons, bundle.job.nodes, [n.name for n in existing])

    async def read_earlier_recoveries(
        self, bundle: RecoveryContext, current_workflow_id: str
    ) -> EarlierRecoveries:
        """:func:`~resurrect.activities.earlier_recoveries.read_earlier_recoveries` with this
        process's Temporal client."""
        return await read_earlier_recoveries(self.client, bundle, current_workflow_id)


def output_paths(job: JobInfo) -> list[str]:
    """The job's output files (stdout, then stderr when it is another file)."""
    return [p for p in dict.fromkeys([job.stdout_path, job.stderr_path]) if p]


#: How long looking up the interrupted attempt's newest intact checkpoint may take.
VERIFIED_STEP_TIMEOUT_S = 120.0


async def newest_verified_step(bundle: RecoveryContext, quick_s: float | None) -> int | None:
    """The step of the newest checkpoint in the job's ``checkpoint_dir`` that verifies
    (quick level, in the checkpoint helper as the job's owner); None when there is none,
    no directory, or it cannot be verified now (no progress is then shown)."""
    root = bundle.policy.checkpoint_dir
    if not root:
        return None
    from resurrect.checkpoint.as_owner import run_helper
    from resurrect.checkpoint.helper import HelperRequest

    request = HelperRequest(
        op="verify",
        root=root,
        level="quick",
        owner_uid=bundle.job.user_id,
        owner_gid=bundle.job.group_id,
    )
    verdict = await run_helper(request, timeout_s=VERIFIED_STEP_TIMEOUT_S, quick_s=quick_s)
    return verdict.resume_step if verdict.verified and verdict.latest_valid else None


async def _nothing(value: ResultT) -> ResultT:
    """``value``, awaited: what a visibility read would say of a job never requeued (no
    earlier recovery), without asking."""
    return value


def _keeping_independent(diagnosis: Diagnosis, found: Sequence[Evidence]) -> Diagnosis:
    """The diagnosis with every node agent or scheduler finding of its class kept.

    Attribution lists a bounded number of items; a job printing many lines of its own must
    not push the second opinion out of the list (planning looks for it there).
    """
    missing = [
        e
        for e in found
        if e.fault_class is diagnosis.fault_class
        and e.role == "root"
        and evidence_source(e) in INDEPENDENT_SOURCES
        and e not in diagnosis.evidence
    ]
    if not missing:
        return diagnosis
    return diagnosis.model_copy(update={"evidence": [*diagnosis.evidence, *missing]})


def as_interrupted(job: JobInfo, interruption: Interruption) -> JobInfo:
    """The job as its interrupted attempt ran.

    Slurm may have moved on before the recovery reads the job: a node failure makes
    slurmctld requeue a job at once, so the job read is a later attempt, pending without
    nodes or already running elsewhere. The nodes the interrupted attempt ran on are then the
    ones its sensor saw (``interruption.nodes``), and those are the nodes to judge (drain the
    lost one, exclude it). Everything else stays as read."""
    moved_on = job.restart_count > interruption.restart_count or not job.nodes
    if not moved_on or not interruption.nodes:
        return job
    return job.model_copy(update={"nodes": list(interruption.nodes)})


def _awaits_second_opinion(
    diagnosis: Diagnosis, job_nodes: Sequence[str], watching: list[str]
) -> bool:
    """A hardware diagnosis from job output alone, about a node whose agent is watching."""
    if diagnosis.fault_class not in NODE_CLASSES or independent_evidence(diagnosis):
        return False
    implicated, _ = match_job_nodes(diagnosis.culprit_hosts, job_nodes)
    return bool(set(implicated or job_nodes) & set(watching))
