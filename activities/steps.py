"""The built-in recovery steps, run by recovery plans (``resurrect/plans/default.yaml``).

Each is named in full in its ``@step`` (``recovery.drain_nodes``), as the plans call it.
Each is idempotent: it checks the current state before acting and reports
``changed=False`` work as done (draining a drained node, requeueing a job that was already
requeued are no-ops), so a retry after a killed worker repeats nothing. Each describes in
observe mode what it would have done.

``verify_checkpoint`` is in ``checkpoint_step``.

``notify``, ``verify_checkpoint`` and ``wait_running`` are quick: their first attempt runs
as a local activity of a few seconds (``StepInput.quick_s``; a marker in the recovery's own
workflow task instead of an activity task). Checkpoint verification runs a helper process as
the job's owner over files of any size, and a requeued job may wait an hour before it runs:
when the few seconds are not enough they raise NeedsMoreTime and the recovery runs them again
as activity tasks. Draining and requeueing wait on other workflows (the drain budget's
update, the repair workflows' signals): they are quick when those workflows have a task
queue and worker of their own, the default (``QUICK_WITH_OPERATOR_QUEUE`` in
``workers/recovery_worker.py``), since a local activity holds a workflow-task slot while it
runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    JobInfo,
    JobState,
    OutputMark,
    RecoveryOutcomeKind,
    StepResult,
)
from resurrect.errors import (
    JobCancelled,
    JobNotFound,
    NeedsMoreTime,
    NodeNotFound,
    PermanentStepError,
    SchedulerError,
    SchedulerRefused,
)
from resurrect.goodput.advice_note import ADVICE_DEADLINE_S, advice_note, not_computed_note
from resurrect.log_reading import output_mark
from resurrect.operator.exclusions import ExclusionPlan
from resurrect.operator.models import DrainGrant
from resurrect.scheduler.base import DRAIN_REASON_PREFIX
from resurrect.steps.runtime import StepContext, StepFn, step


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------- drain
@step("recovery.drain_nodes", handles_observe=True)
async def drain_nodes(ctx: StepContext, params: None) -> StepResult:
    """Drain the plan's implicated nodes with our reason prefix, within the drain budget.

    The cluster's budget workflow decides first (``operator.budget_client.reserve_drains``):
    nodes over the budget are not drained (the recovery restarts without them, noted) or,
    with ``isolation.over_budget: await_approval``, the step asks for approval. Only the
    nodes this recovery drained are reported as drained (a node someone else drained is
    noted, never claimed), and each gets a repair workflow that returns it to service.
    """
    from resurrect.operator.budget_client import (
        cluster_shape,
        reservation_for,
        reserve_drains,
    )
    from resurrect.operator.models import NodeDrainReport
    from resurrect.operator.repair_client import report_to_repair

    reason = (
        f"{DRAIN_REASON_PREFIX} {ctx.diagnosis.fault_class.value} job {ctx.job.job_id}"
        f" [{ctx.workflow_id}]"
    )
    result = StepResult()
    wanted = list(dict.fromkeys(ctx.decision.drain_nodes))
    if not wanted:
        result.detail = "drained nothing"
        return result
    # the wanted nodes read fresh by name; the cluster's size at most once a minute
    nodes = await ctx.scheduler.list_nodes_named(wanted)
    by_name = {n.name: n for n in nodes}
    request = reservation_for(
        ctx.config,
        workflow_id=ctx.workflow_id,
        job_id=ctx.job.job_id,
        wanted=wanted,
        nodes=nodes,
        shape=await cluster_shape(ctx.scheduler),
        approved_by=ctx.input.approved_by,
    )
    grant = await reserve_drains(
        ctx.client, ctx.config, request, ctx.scheduler, observe=ctx.observe
    )
    first_charged = _first_charged(ctx, grant, request.limits.window_s)
    result.notes.extend(f"drain budget: {why}" for why in grant.reasons)
    if grant.denied:
        if ctx.config.isolation.over_budget == "await_approval" and not ctx.input.approved_by:
            result.approval_needed = f"drain {', '.join(grant.denied)} over the drain budget"
        result.notes.append(
            f"not draining {', '.join(grant.denied)}: drain budget reached;"
            " the job restarts without them (excluded, not drained)"
        )
    for name in wanted:
        if name in grant.denied:
            continue
        if ctx.observe:
            result.would_have.append(f"would drain {name}: {reason}")
            continue
        before = by_name.get(name)
        if before is not None and before.drained and f"[{ctx.workflow_id}]" not in before.reason:
            who = "resurrect" if before.reason.startswith(DRAIN_REASON_PREFIX) else "someone else"
            result.notes.append(f"{name} already drained by {who} ({before.reason}): left as is")
            continue
        if (
            before is not None
            and not before.drained
            and name not in first_charged
            and await _drained_before(ctx, name)
        ):
            result.drained_nodes.append(name)
            result.notes.append(
                f"{name}: drained by this recovery before and returned to service since:"
                " left in service (only a new fault drains it again)"
            )
            continue
        try:
            mutation = await ctx.scheduler.drain_node(name, reason)
        except NodeNotFound as exc:
            result.notes.append(f"cannot drain {name}: {exc}")
            continue
        if not mutation.changed and before is not None and not before.drained:
            # drained by someone else between our read and our drain
            result.notes.append(f"{name}: {mutation.detail}: left as is")
            continue
        result.drained_nodes.append(name)
        result.notes.append(mutation.detail)
        report = NodeDrainReport(
            incident=ctx.workflow_id,
            job_id=ctx.job.job_id,
            fault_class=ctx.diagnosis.fault_class.value,
            reason=reason,
            lemon=name in ctx.decision.lemon_nodes,  # it stays out, flagged (lemons/policy.py)
        )
        await report_to_repair(ctx.client, ctx.config, name, report)  # once per recovery
    result.detail = f"drained {', '.join(result.drained_nodes) or 'nothing'}"
    return result


def _first_charged(ctx: StepContext, grant: DrainGrant, window_s: float) -> frozenset[str]:
    """The nodes this recovery cannot have drained before: those the budget charged to its
    window for the first time with this answer. Every drain follows a reservation, and the
    window (``window_s``) keeps each reservation's record, so a recovery whose interruption
    was observed less than half a window ago that had drained a node would find its own
    record there. Empty when the budget does not say (``grant.recorded`` None) or the
    interruption is older (or, by this clock, not observed yet): the repair record decides."""
    if grant.recorded is None:
        return frozenset()
    observed = ctx.input.bundle.interruption.observed_at
    observed = observed if observed.tzinfo else observed.replace(tzinfo=UTC)
    age_s = (datetime.now(UTC) - observed).total_seconds()
    return frozenset(grant.recorded) if 0 <= age_s < window_s / 2 else frozenset()


async def _drained_before(ctx: StepContext, node: str) -> bool:
    """Whether this recovery drained ``node`` already, as the node's repair workflow
    recorded it (the drain step reports every drain there right after it); asked only for
    a node the drain budget's answer cannot rule out (:func:`_first_charged`).

    The step can run again after it drained: a local attempt whose workflow task was lost
    (the worker died, or the task failed because a report came in while the recovery
    closed) runs again from a replay, an activity attempt whose completion was lost is
    retried. A node it finds in service then was returned (by an operator, or its repair)
    after this recovery's drain, and only a new fault may drain it again. Without a repair
    record (``repair.enabled: false``, or no worker answers) nothing is known: False."""
    from resurrect.operator.repair_client import node_state

    if ctx.client is None or not ctx.config.repair.enabled:
        return False
    state = await node_state(ctx.client, ctx.config.cluster.name, node, ctx.config)
    return state is not None and state.drained_by(ctx.workflow_id)


# ---------------------------------------------------------------------------- requeue
def _already_requeued(job: JobInfo, failed_restart_count: int, exclude: list[str]) -> bool:
    """The failed attempt was already followed by a new one that needs nothing from us.

    Running again on none of the excluded nodes counts (slurmctld may have requeued the job
    itself before our exclusion was set: requeueing a healthy run only to add an exclusion
    would kill it, and the drained nodes keep it off them anyway); so does pending, released,
    with the exclusion in place; and so does a new attempt that already ran to completion
    (requeueing that would run a finished job again).
    """
    if job.restart_count <= failed_restart_count or job.held:
        return False
    if job.state is JobState.COMPLETED:
        return True
    if job.state is JobState.RUNNING:
        return not set(job.nodes) & set(exclude)
    return job.state is JobState.PENDING and set(exclude) <= set(job.excluded_nodes)


@step("recovery.requeue_job", handles_observe=True)
async def requeue_job(ctx: StepContext, params: None) -> StepResult:
    """Requeue the job (same id, same owner) excluding implicated nodes; hold first.

    The job is read again right before acting: one that a person cancelled meanwhile
    (state CANCELLED, also while resurrect held it pending) is left cancelled.
    """
    job_id = ctx.job.job_id
    exclude = list(dict.fromkeys([*ctx.decision.exclude_nodes, *ctx.state.drained_nodes]))
    shown = ", ".join(exclude) or "no nodes"
    try:
        job = await ctx.scheduler.get_job(job_id)
    except JobNotFound as exc:
        raise PermanentStepError(str(exc)) from exc
    if job.state is JobState.CANCELLED:
        return _cancelled(job_id, job.state_reason)
    failed_attempt = ctx.input.bundle.interruption.restart_count
    if job.state is JobState.COMPLETED and job.restart_count == failed_attempt:
        return StepResult(
            detail=f"job {job_id} completed on its own: not requeued",
            stop_recovery=True,
            outcome=RecoveryOutcomeKind.JOB_COMPLETED,
        )
    # by when the failed attempt's nodes out of contact have certainly fenced (recorded
    # silence: a retry, after a cancelled or lost attempt, finds the same deadline)
    fence_until, fencing_nodes = (0.0, []) if ctx.observe else await _fence_deadline(ctx)
    waited = max(0.0, fence_until - time.time())
    # slurmctld's own requeue (a --requeue job on a node it declared DOWN) does not wait for
    # the fence: a job it left pending is held until the deadline like any other
    if _already_requeued(job, failed_attempt, exclude) and not (
        waited and job.state is JobState.PENDING
    ):
        notes = (
            [_started_before_fence(job, fencing_nodes, waited)]
            if waited and job.state is JobState.RUNNING
            else []
        )
        return StepResult(
            requeued=True,
            excluded_nodes=exclude,
            detail=f"job {job_id} already requeued (restart {job.restart_count}),"
            f" excluding {shown}",
            notes=notes,
        )
    if ctx.observe:
        message = f"would requeue job {job_id} ({job.state.value}) excluding {shown}"
        return StepResult(detail=message, would_have=[message])
    # the plan's list holds the job's own exclusions too: only the rest is implicated now
    implicated = [n for n in exclude if n not in job.excluded_nodes]
    exclusions = await _exclusions(ctx, job, implicated)
    if waited and ctx.quick_s is not None and waited > ctx.quick_s / 2:
        # a quick attempt cut short mid-wait would leave the job held for the retry
        raise NeedsMoreTime(f"{waited:.0f} s to wait for {', '.join(fencing_nodes)} to fence")
    fencing: list[str] = []

    async def await_fencing() -> None:  # while the job is held: no new attempt starts
        from resurrect.activities.fencing_wait import sleep_until, waited_note

        await sleep_until(fence_until, fencing_nodes, ctx.heartbeat)
        fencing.append(waited_note(waited, fencing_nodes, ctx.config.fencing))

    try:
        mutation = await ctx.scheduler.requeue_excluding(
            job_id,
            [n for n in exclude if n not in exclusions.dropped],
            drop=exclusions.dropped,
            before_release=await_fencing if waited else None,
            release_not_before=fence_until,
        )
    except JobCancelled as exc:
        return _cancelled(job_id, str(exc))
    except (JobNotFound, SchedulerRefused) as exc:
        raise PermanentStepError(str(exc)) from exc
    await _record_exclusions(ctx, job, implicated, exclusions.dropped)
    return StepResult(
        requeued=True,
        excluded_nodes=exclusions.exclude,
        detail=mutation.detail,
        notes=[*fencing, *exclusions.notes],
        dropped_exclusions=exclusions.dropped,
    )


def _started_before_fence(job: JobInfo, nodes: list[str], left_s: float) -> str:
    """The note on a job slurmctld requeued and started by itself before ``nodes`` (out of
    contact) had certainly fenced its previous attempt."""
    return (
        f"job {job.job_id} was started again by slurmctld (restart {job.restart_count}, on"
        f" {','.join(job.nodes) or '?'}) {left_s:.1f} s before {', '.join(nodes)} (out of"
        " contact) had certainly fenced the old attempt: slurmctld's SlurmdTimeout is shorter"
        " than the fence (docs/fencing.md); its checkpoints written after the fence are not"
        " resumed from"
    )


async def _fence_deadline(ctx: StepContext) -> tuple[float, list[str]]:
    """With ``fencing.enabled``: by when the failed attempt's nodes out of contact have
    certainly killed its ranks, and which (resurrect/activities/fencing_wait.py)."""
    if ctx.client is None:
        return 0.0, []
    from resurrect.activities.fencing_wait import fence_deadline

    interruption = ctx.input.bundle.interruption
    nodes = list(dict.fromkeys([*ctx.job.nodes, *interruption.nodes]))
    return await fence_deadline(ctx.client, interruption.cluster, nodes, ctx.config.fencing)


async def _exclusions(ctx: StepContext, job: JobInfo, adding: list[str]) -> ExclusionPlan:
    """Which nodes resurrect excluded earlier from this job it gives back now (back in
    service, or the job would not fit otherwise): see resurrect/operator/exclusions.py."""
    from resurrect.operator.exclusions import plan_exclusions
    from resurrect.operator.repair_client import exclusion_records

    if not job.excluded_nodes:  # nothing excluded before: nothing to give back, no reads
        return plan_exclusions(
            job_id=job.job_id, current=[], adding=adding, ours={}, returned={}, usable=[], needed=0
        )
    ours, returned = await exclusion_records(ctx.client, ctx.config, job.job_id, job.excluded_nodes)
    nodes = await ctx.scheduler.list_nodes()
    usable = [
        n.name
        for n in nodes
        if not n.drained
        and not n.unavailable
        and (not job.partition or not n.partitions or job.partition in n.partitions)
    ]
    return plan_exclusions(
        job_id=job.job_id,
        current=job.excluded_nodes,
        adding=adding,
        ours=ours,
        returned=returned,
        usable=usable,
        needed=max(1, job.num_nodes or len(job.nodes)),
    )


async def _record_exclusions(
    ctx: StepContext, job: JobInfo, adding: list[str], dropped: list[str]
) -> None:
    """Record in each node's repair workflow that resurrect excluded it from the job (only
    nodes it added itself: never the owner's own exclusions), or gave it back. A node this
    recovery drained is not told again: its ``drained`` report records the exclusion."""
    from resurrect.operator.models import NodeDrainReport
    from resurrect.operator.repair_client import report_to_repair

    drained = set(ctx.state.drained_nodes)
    changes = [(n, "excluded") for n in adding if n not in job.excluded_nodes and n not in drained]
    changes += [(n, "included") for n in dropped]
    for node, kind in changes:
        report = NodeDrainReport(
            incident=ctx.workflow_id,
            job_id=job.job_id,
            fault_class=ctx.diagnosis.fault_class.value,
            reason=f"{kind} by {ctx.workflow_id}",
            kind="excluded" if kind == "excluded" else "included",
        )
        await report_to_repair(ctx.client, ctx.config, node, report)


def _cancelled(job_id: str, why: str) -> StepResult:
    """A person cancelled the job during the recovery: their decision stands."""
    return StepResult(
        detail=f"job {job_id} was cancelled during the recovery: not requeued",
        notes=[
            f"job {job_id} is CANCELLED (scancel by its owner or an administrator"
            f"{': ' + why if why else ''}); a cancelled job is never requeued"
        ],
        stop_recovery=True,
        outcome=RecoveryOutcomeKind.CANCELLED_DURING_RECOVERY,
    )


# ---------------------------------------------------------------------------- wait
class WaitParams(Params):
    timeout_s: float | None = Field(default=None, gt=0)  # default: recovery.wait_running_timeout_s
    poll_interval_s: float = Field(default=1.0, gt=0)


def next_attempt_output(job: JobInfo) -> list[OutputMark]:
    """Where the output files of ``job``, pending after a requeue, end now: where its next
    attempt's output will begin (a requeued job may append every attempt to one file)."""
    paths = dict.fromkeys([job.stdout_path, job.stderr_path])
    marks = [output_mark(path, job.user_id) for path in paths if path]
    return [mark for mark in marks if mark is not None]


@step("recovery.wait_running", mutating=False, quick=True)
async def wait_running(ctx: StepContext, params: WaitParams) -> StepResult:
    """Wait until the requeued job runs again, on none of the excluded nodes.

    The sizes of its output files taken between two reads that found it pending (its earlier
    run gone, the next not started) are the result's ``next_attempt_output``: where the next
    recovery of the job starts reading them. A first attempt (``quick_s``) after a restart
    charged to the job's budget does not wait: it gives way to an activity task at the first
    read that finds the job not running, so the charge reaches visibility before the wait
    (``StepInput.restart_charged``)."""
    if ctx.observe or not ctx.state.requeued:
        return StepResult(detail="job was not requeued: nothing to wait for", running_again=False)
    timeout = params.timeout_s or ctx.input.bundle.wait_running_timeout_s
    exclude = set(ctx.state.excluded_nodes)
    started = time.monotonic()
    deadline = started + timeout
    last: JobInfo | None = None
    marks: list[OutputMark] = []
    pending: JobInfo | None = None  # the last read, when it found the job pending
    while time.monotonic() < deadline:
        taken = None if pending is None else await asyncio.to_thread(next_attempt_output, pending)
        try:
            last = await ctx.scheduler.get_job(ctx.job.job_id)
        except JobNotFound as exc:
            raise PermanentStepError(str(exc)) from exc
        except SchedulerError as exc:
            ctx.heartbeat(f"scheduler: {exc}")
            await asyncio.sleep(params.poll_interval_s)
            continue
        # COMPLETING: the interrupted run is still being cleaned up (a dead node keeps the
        # job COMPLETING until slurmctld declares it DOWN); keep waiting.
        if last.state in (JobState.RUNNING, JobState.COMPLETED):
            bad = sorted(set(last.nodes) & exclude)
            detail = f"job {last.job_id} {last.state.value} on {','.join(last.nodes)}"
            if bad:
                detail += f" - WARNING: on excluded node(s) {','.join(bad)}"
            notes = [] if bad else await _checkpoint_advice(ctx, last)
            return StepResult(
                running_again=not bad,
                ok=not bad,
                detail=detail,
                notes=notes,
                next_attempt_output=marks,
            )
        if last.held_after_failed_launch:
            # slurmctld requeued and held the restart itself: a new interruption of the job,
            # which the Slurm watcher reports and whose recovery releases the hold
            on = f" on {','.join(last.nodes)}" if last.nodes else ""
            return StepResult(
                ok=False,
                running_again=False,
                detail=f"job {last.job_id}'s restart failed to launch{on}: slurmctld requeued"
                f" and held it ({last.state_reason}, restart {last.restart_count})",
            )
        pending = last if last.state is JobState.PENDING else None
        if pending is not None and taken is not None:
            marks = taken  # pending before and after: no attempt was writing
        if last.state not in (JobState.PENDING, JobState.REQUEUED, JobState.COMPLETING):
            return StepResult(
                ok=False,
                running_again=False,
                detail=f"job {last.job_id} ended {last.state.value} before running",
            )
        ctx.heartbeat(f"job {last.job_id} {last.state.value}")  # still waiting
        if ctx.quick_s is not None and ctx.input.restart_charged:
            # the recovery publishes its charge before it waits for an activity task: a first
            # attempt that waited here would hide it from the recovery of a next attempt that
            # fails meanwhile, which would then count one restart too few
            raise NeedsMoreTime(f"job {last.job_id} still {last.state.value}; restart charged")
        if ctx.quick_s is not None and time.monotonic() - started >= ctx.quick_s:
            raise NeedsMoreTime(f"job {last.job_id} still {last.state.value}")
        await asyncio.sleep(params.poll_interval_s)
    return StepResult(
        ok=False,
        running_again=False,
        detail=f"job {ctx.job.job_id} not running after {timeout:.0f} s",
    )


# The advice given per job attempt in this process, newest last: an attempt of the step run
# again (a quick attempt given up, an activity retried) gives the same note without reading
# the job's recoveries again.
_ADVICE_GIVEN: OrderedDict[tuple[str, str, int], str] = OrderedDict()
_ADVICE_KEPT = 1024


def _run_id() -> str | None:
    """The recovery's workflow run this activity serves (one advice per run and attempt);
    None outside an activity."""
    from temporalio import activity

    try:
        return activity.info().workflow_run_id or None
    except RuntimeError:
        return None


async def _checkpoint_advice(ctx: StepContext, job: JobInfo) -> list[str]:
    """The job's checkpoint interval advice, for the recovery's notes (none without a
    Temporal client to read the cluster's recoveries from); once per job attempt."""
    if ctx.client is None:
        return []
    run_id = _run_id()
    key = (run_id or "", job.job_id, job.restart_count)
    given = _ADVICE_GIVEN.get(key) if run_id else None
    if given is not None:
        return [given]
    # a quick (local) attempt waits for the advice half its time at most
    deadline = ADVICE_DEADLINE_S if ctx.quick_s is None else min(ADVICE_DEADLINE_S, ctx.quick_s / 2)
    note = await advice_note(ctx.client, ctx.scheduler, ctx.config, job, deadline_s=deadline)
    if run_id and note != not_computed_note(deadline):  # one cut short: computed again
        _ADVICE_GIVEN[key] = note
        while len(_ADVICE_GIVEN) > _ADVICE_KEPT:
            _ADVICE_GIVEN.popitem(last=False)
    return [note]


# ---------------------------------------------------------------------------- notify
class NotifyParams(Params):
    severity: Literal["info", "warning", "critical"] = "warning"
    message: str | None = Field(default=None, max_length=4000)


def _append_json_line(path: Path, record: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def append_notification(config: ResurrectConfig, record: dict[str, object]) -> None:
    """One JSON line in ``<state_dir>/notifications.jsonl`` (what ``notify`` writes)."""
    _append_json_line(config.temporal.state_dir / "notifications.jsonl", record)


@step("recovery.notify", mutating=False, quick=True)
async def notify(ctx: StepContext, params: NotifyParams) -> StepResult:
    """Tell people: a log line and a JSON line in ``<state_dir>/notifications.jsonl``."""
    message = params.message or "; ".join(ctx.decision.reasons)
    record: dict[str, object] = {
        "time": datetime.now(UTC).isoformat(),
        "severity": params.severity,
        "workflow_id": ctx.workflow_id,
        "job_id": ctx.job.job_id,
        "user": ctx.job.user,
        "fault_class": ctx.diagnosis.fault_class.value,
        "recipients": ctx.input.bundle.policy.notify,
        "message": message,
        "observe": ctx.observe,
    }
    level = {"info": 20, "warning": 30, "critical": 50}[params.severity]
    ctx.log.log(level, "job %s: %s", ctx.job.job_id, message)
    path = ctx.config.temporal.state_dir / "notifications.jsonl"
    await asyncio.to_thread(_append_json_line, path, record)
    return StepResult(detail=f"notified ({params.severity}): {message}")


def builtin_steps() -> dict[str, StepFn]:
    """Activity name -> step function of every built-in step."""
    from resurrect.activities.checkpoint_step import verify_checkpoint
    from resurrect.activities.external_program import run_program

    steps: list[StepFn] = [
        drain_nodes,
        verify_checkpoint,
        requeue_job,
        wait_running,
        notify,
        run_program,
    ]
    from resurrect.steps.runtime import step_meta

    return {step_meta(fn).name: fn for fn in steps}
