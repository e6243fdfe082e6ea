"""Check-act-verify logic shared by the Slurm backends (CLI and pyslurm).

A backend supplies reads (``list_jobs``, ``list_nodes``) and primitive actions (set a drain,
resume, hold, requeue-hold, set the exclusion, release, cancel). This class turns them into
the idempotent, verified mutations of the Scheduler protocol:

* every mutation reads the current state first and returns ``changed=False`` when nothing is
  needed (draining a drained node, requeueing a job already pending with the exclusion);
* after acting it polls until Slurm shows the requested state, else raises SchedulerError.

Requeue paths (checked on Slurm 22.05):

* RUNNING / SUSPENDED / finished (COMPLETED, FAILED, NODE_FAIL, ...) requeueable job:
  requeuehold -> set ExcNodeList -> release. If a node of the job is dead but not yet DOWN,
  Slurm shows the job COMPLETING (priority 0, Reason=job_requeued_in_held_state) until the
  node is declared DOWN; the exclusion is set and the job released right away, then the
  call waits (at most verify_timeout) for that COMPLETING phase to end, so the job is
  PENDING/RUNNING when it returns; if it lasts longer, the result's detail says so.
* PENDING job (e.g. slurmctld already requeued it after NODE_FAIL: Reason=BeginTime,
  restart count +1): hold -> set ExcNodeList -> release.
* ``--no-requeue`` job: SchedulerRefused (only resubmission as its owner could restart it).
* CANCELLED job (``scancel`` by its owner or an administrator, also while resurrect held it
  pending): JobCancelled, and the job is left cancelled. Slurm itself would requeue a
  cancelled batch job, so the state is re-read before the hold and again before the
  release.
"""

from __future__ import annotations

import asyncio
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Sequence

from resurrect.contracts import FINISHED_JOB_STATES, JobInfo, JobState, MutationResult, NodeInfo
from resurrect.errors import (
    ConfigError,
    JobAlreadyPending,
    JobCancelled,
    JobCompleting,
    JobNotFound,
    NodeNotFound,
    NodeNotRegistered,
    SchedulerError,
    SchedulerRefused,
)
from resurrect.scheduler.base import DRAIN_REASON_PREFIX, SchedulerBase
from resurrect.scheduler.hold_marker import HoldMarkKey, has_marker, marked, read_mark, unmarked
from resurrect.scheduler.validation import (
    sanitize_reason,
    validate_job_id,
    validate_node_name,
    validate_node_names,
)

# The base state of a node slurmctld has not heard from since it started.
UNREGISTERED_NODE_STATE = "UNKNOWN"


def drain_reason(reason: str) -> str:
    """The reason resurrect writes: sanitized, always starting with DRAIN_REASON_PREFIX."""
    clean = sanitize_reason(reason)
    if not clean.startswith(DRAIN_REASON_PREFIX):
        clean = sanitize_reason(f"{DRAIN_REASON_PREFIX} {clean}")
    return clean


def _not_cancelled(job: JobInfo, cause: BaseException | None = None) -> JobInfo:
    """``job``, unless a person cancelled it: then JobCancelled (it must stay cancelled)."""
    if job.state is JobState.CANCELLED:
        raise JobCancelled(
            f"job {job.job_id} was cancelled ({job.state_reason or 'scancel'}): not requeued"
        ) from cause
    return job


class VerifiedScheduler(SchedulerBase):
    """Base of the Slurm backends: idempotent, verified mutations over primitive actions."""

    def __init__(self, cluster_name: str, *, verify_timeout: float, poll_interval: float) -> None:
        self._cluster_name = cluster_name
        self.verify_timeout = verify_timeout
        self.poll_interval = poll_interval
        # tags resurrect's hold marks; the factory gives it the configured key file (a
        # scheduler built without one recognises only the marks it wrote itself)
        self.hold_mark_key = HoldMarkKey()

    @property
    def cluster_name(self) -> str:
        return self._cluster_name

    # ------------------------------------------------------------------ backend primitives
    @abstractmethod
    async def list_jobs(self) -> list[JobInfo]: ...

    @abstractmethod
    async def list_nodes(self) -> list[NodeInfo]: ...

    @abstractmethod
    async def _act_drain(self, node: str, reason: str) -> None: ...

    @abstractmethod
    async def _act_resume(self, node: str) -> None: ...

    @abstractmethod
    async def _act_hold(self, job_id: str) -> None: ...

    @abstractmethod
    async def _act_requeuehold(self, job_id: str) -> None: ...

    @abstractmethod
    async def _act_exclude(self, job_id: str, nodes: list[str]) -> None: ...

    @abstractmethod
    async def _act_release(self, job_id: str) -> None: ...

    @abstractmethod
    async def _act_cancel(self, job_id: str) -> None: ...

    async def _act_admin_comment(self, job_id: str, text: str) -> None:
        """Set the job's AdminComment (the hold mark); backends that cannot, refuse."""
        raise SchedulerRefused(f"{type(self).__name__} cannot set a job's AdminComment")

    # ------------------------------------------------------------------ the hold mark
    async def read_admin_comment(self, job_id: str) -> str:
        """The job's AdminComment, fresh ("" when unset). Backends whose ``get_job`` leaves
        it out (``admin_comment`` None) read it with a query of its own."""
        comment = (await self.get_job(job_id)).admin_comment
        if comment is None:
            raise SchedulerRefused(f"{type(self).__name__} cannot read a job's AdminComment")
        return comment

    async def _mark_held(self, job: JobInfo) -> str | None:
        """Leave resurrect's hold mark on ``job`` (for the fail-open watchdog); a note when
        it cannot (the requeue goes on: the mark only matters if resurrect dies)."""
        try:
            comment = await self.read_admin_comment(job.job_id)
            key = self.hold_mark_key.get()
            mark = marked(comment, time.time(), key=key, job_id=job.job_id)
            await self._act_admin_comment(job.job_id, mark)
        except (SchedulerError, ConfigError) as exc:
            return f"no hold mark ({exc}): the watchdog cannot release this hold"
        return None

    async def _clear_mark(self, jid: str) -> None:
        """Remove the hold mark after the release (best effort: a stale mark on a released
        job is ignored by the watchdog and replaced at the next hold)."""
        try:
            comment = await self.read_admin_comment(jid)
            if has_marker(comment):
                await self._act_admin_comment(jid, unmarked(comment))
        except SchedulerError:
            return

    async def release_stale_hold(self, job_id: str, bound_s: float) -> MutationResult:
        """Release ``job_id`` if resurrect has held it (its valid mark) for longer than
        ``bound_s``.

        A job without a valid mark (an administrator's or its owner's hold, a mark resurrect
        did not write) is never released; a cancelled job is left cancelled."""
        jid = validate_job_id(job_id)
        job = await self.get_job(jid)
        now = time.time()
        mark = read_mark(
            await self.read_admin_comment(jid), key=self.hold_mark_key.get(), job_id=jid, now=now
        )
        if mark is not None and mark.problem is not None:
            return MutationResult(
                target=jid, operation="release", changed=False, detail=f"left held: {mark.problem}"
            )
        if mark is None or mark.at is None or not job.held or job.state is not JobState.PENDING:
            return MutationResult(
                target=jid, operation="release", changed=False, detail="not held by resurrect"
            )
        held_s = now - mark.at
        if held_s <= bound_s:
            return MutationResult(
                target=jid,
                operation="release",
                changed=False,
                detail=f"held by resurrect for {held_s:.0f} s (bound {bound_s:g} s)",
            )
        await self._act_release(jid)
        await self._clear_mark(jid)
        return MutationResult(
            target=jid,
            operation="release",
            changed=True,
            detail=f"released: held by resurrect for {held_s:.0f} s, more than {bound_s:g} s",
        )

    # ------------------------------------------------------------------ reads
    async def get_job(self, job_id: str) -> JobInfo:
        jid = validate_job_id(job_id)
        for job in await self.list_jobs():
            if job.job_id == jid:
                return job
        raise JobNotFound(f"job {jid} not known to slurmctld of {self.cluster_name}")

    async def get_node(self, name: str) -> NodeInfo:
        node_name = validate_node_name(name)
        for node in await self.list_nodes():
            if node.name == node_name:
                return node
        raise NodeNotFound(f"node {node_name} not in cluster {self.cluster_name}")

    async def _wait_for(self, what: str, probe: Callable[[], Awaitable[bool]]) -> None:
        deadline = time.monotonic() + self.verify_timeout
        while True:
            if await probe():
                return
            if time.monotonic() >= deadline:
                raise SchedulerError(f"{self.cluster_name}: timed out waiting until {what}")
            await asyncio.sleep(self.poll_interval)

    # ------------------------------------------------------------------ node mutations
    async def drain_node(self, name: str, reason: str) -> MutationResult:
        """Drain ``name`` with a prefixed reason. A node already drained (by anyone) is left
        as it is: an operator's reason is never overwritten, or resurrect could resume it."""
        node_name = validate_node_name(name)
        full_reason = drain_reason(reason)
        node = await self.get_node(node_name)
        if node.drained:
            ours = node.reason.startswith(DRAIN_REASON_PREFIX)
            who = "resurrect" if ours else "someone else"
            return MutationResult(
                target=node_name,
                operation="drain",
                changed=False,
                detail=f"already drained by {who}: {node.reason}",
            )
        await self._act_drain(node_name, full_reason)

        async def drained() -> bool:
            return (await self.get_node(node_name)).drained

        await self._wait_for(f"node {node_name} is drained", drained)
        return MutationResult(target=node_name, operation="drain", changed=True, detail=full_reason)

    async def resume_node(self, name: str) -> MutationResult:
        """Resume ``name`` only if resurrect drained it (reason prefix), else SchedulerRefused.

        A node slurmctld has not heard from since it started (state ``UNKNOWN``) is not
        resumed yet (NodeNotRegistered, retryable): Slurm 22.05 answers such a resume with
        "Invalid node state specified" after clearing the drain. A refused resume is read
        back: a node no longer drained was resumed, whatever Slurm answered."""
        node_name = validate_node_name(name)
        node = await self.get_node(node_name)
        if not node.drained:
            return MutationResult(
                target=node_name,
                operation="resume",
                changed=False,
                detail=f"not drained (state {node.state})",
            )
        if not node.reason.startswith(DRAIN_REASON_PREFIX):
            raise SchedulerRefused(
                f"node {node_name} was not drained by resurrect (reason {node.reason!r}); "
                "refusing to resume it"
            )
        if node.state == UNREGISTERED_NODE_STATE:
            raise NodeNotRegistered(
                f"node {node_name} has not registered since slurmctld started"
                f" ({node.state_text}): resumed once it has"
            )
        answer = ""
        try:
            await self._act_resume(node_name)
        except SchedulerRefused as exc:
            if (await self.get_node(node_name)).drained:
                raise
            answer = f"; Slurm answered {exc} but the node is no longer drained"

        async def resumed() -> bool:
            return not (await self.get_node(node_name)).drained

        await self._wait_for(f"node {node_name} is no longer drained", resumed)
        return MutationResult(
            target=node_name,
            operation="resume",
            changed=True,
            detail=f"was: {node.reason}{answer}",
        )

    # ------------------------------------------------------------------ job mutations
    async def requeue_excluding(
        self,
        job_id: str,
        exclude_nodes: list[str],
        *,
        drop: Sequence[str] = (),
        before_release: Callable[[], Awaitable[object]] | None = None,
        release_not_before: float = 0.0,
    ) -> MutationResult:
        """Requeue keeping id and owner, excluding ``exclude_nodes`` (added to any existing
        exclusion, less ``drop``), awaiting ``before_release`` while the job is held. If
        setting the exclusion or the wait fails (or is cancelled), the job is still released
        (fail open) and the error is raised; but never before ``release_not_before`` (epoch
        seconds: the fencing deadline): until then it stays held and marked, and a retry (or
        the watchdog, past its bound) releases it."""
        jid = validate_job_id(job_id)
        exclude = validate_node_names(exclude_nodes)
        dropped = set(validate_node_names(list(drop))) - set(exclude)
        job = _not_cancelled(await self.get_job(jid))
        if not job.requeue_allowed:
            raise SchedulerRefused(
                f"job {jid} was submitted with --no-requeue; only its owner can resubmit it"
            )
        if exclude:
            known = {n.name for n in await self.list_nodes_named(exclude)}
            unknown = [n for n in exclude if n not in known]
            if unknown:
                raise NodeNotFound(f"cannot exclude unknown nodes {unknown} from job {jid}")
        if (
            before_release is None
            and job.state is JobState.PENDING
            and not job.held
            and set(exclude) <= set(job.excluded_nodes)
            and not dropped & set(job.excluded_nodes)
        ):
            return MutationResult(
                target=jid,
                operation="requeue",
                changed=False,
                detail=f"already pending excluding {','.join(job.excluded_nodes) or 'nothing'}",
            )
        steps = await self._hold_for_requeue(job)
        wanted = [n for n in dict.fromkeys([*job.excluded_nodes, *exclude]) if n not in dropped]
        try:
            # scancel of the job we hold makes it CANCELLED: it stays so, never released
            held = _not_cancelled(await self.get_job(jid))
            if set(wanted) != set(held.excluded_nodes):
                await self._act_exclude(jid, wanted)
                steps.append("exclude")
            if before_release is not None:
                await before_release()
            _not_cancelled(await self.get_job(jid))  # the last look, right before release
        except JobCancelled:
            raise
        except BaseException as exc:
            # the exclusion may have failed because the job was cancelled just now
            try:
                now: JobInfo | None = await self.get_job(jid)
            except SchedulerError:
                now = None
            if now is not None:
                _not_cancelled(now, cause=exc)
            if time.time() < release_not_before:
                # an old attempt may still run cut off: held (and marked) until a retry
                # waits out the rest, or the watchdog releases it past its bound
                raise
            await self._act_release(jid)  # fail open: a held job must not stay held
            await self._clear_mark(jid)
            raise
        await self._act_release(jid)
        steps.append("release")
        await self._clear_mark(jid)

        async def requeued() -> bool:
            now = _not_cancelled(await self.get_job(jid))
            if now.held or not set(exclude) <= set(now.excluded_nodes):
                return False
            if now.state in (JobState.PENDING, JobState.COMPLETING):
                return True  # COMPLETING: its old steps are still dying (e.g. on a dead node)
            return now.state is JobState.RUNNING and not set(now.nodes) & set(exclude)

        await self._wait_for(f"job {jid} is requeued excluding {exclude}", requeued)
        final = await self._settle_completing(jid)
        if final.state is JobState.COMPLETING:
            steps.append(
                f"old steps still completing on {','.join(final.nodes) or '?'} "
                "(a dead node is not yet DOWN); the job starts again once they are gone"
            )
        return MutationResult(
            target=jid,
            operation="requeue",
            changed=True,
            detail=(
                f"{' -> '.join(steps)}; state {final.state.value}, restarts "
                f"{final.restart_count}, excluding {','.join(final.excluded_nodes)}"
            ),
        )

    async def give_back_nodes(self, job_id: str, nodes: Sequence[str]) -> MutationResult:
        """Take ``nodes`` off a pending job's exclusion list, neither holding nor requeueing
        it: a job no longer pending, or no longer excluding any of them, is left as it is
        (Slurm refuses the update of a job that started meanwhile)."""
        jid = validate_job_id(job_id)
        giving = set(validate_node_names(list(nodes)))
        job = await self.get_job(jid)
        kept = [n for n in job.excluded_nodes if n not in giving]
        if job.state is not JobState.PENDING or len(kept) == len(job.excluded_nodes):
            return MutationResult(
                target=jid,
                operation="give_back",
                changed=False,
                detail=f"{job.state.value}, excluding {','.join(job.excluded_nodes) or 'nothing'}",
            )
        await self._act_exclude(jid, kept)

        async def given_back() -> bool:
            return not giving & set((await self.get_job(jid)).excluded_nodes)

        await self._wait_for(f"job {jid} no longer excludes {sorted(giving)}", given_back)
        return MutationResult(
            target=jid,
            operation="give_back",
            changed=True,
            detail=f"excluding {','.join(kept) or 'nothing'}",
        )

    async def _settle_completing(self, jid: str) -> JobInfo:
        """Wait (at most verify_timeout) while the job's previous run is still COMPLETING, so
        callers do not mistake the old allocation for the new one. Not an error if it lasts:
        a dead node keeps it COMPLETING until slurmctld declares the node DOWN."""
        deadline = time.monotonic() + self.verify_timeout
        while True:
            job = await self.get_job(jid)
            if job.state is not JobState.COMPLETING or time.monotonic() >= deadline:
                return job
            await asyncio.sleep(self.poll_interval)

    async def _hold_for_requeue(self, job: JobInfo) -> list[str]:
        """Bring the job to PENDING and held: hold if pending, else requeuehold."""
        jid = job.job_id
        # Mark first where Slurm allows it (pending, running): a crash right after the hold
        # then always leaves a mark. A finished job is marked right after its requeuehold.
        unmarked_note = None if job.state in FINISHED_JOB_STATES else await self._mark_held(job)
        if job.state is JobState.PENDING:
            if job.held:
                return ["already held"]
            await self._act_hold(jid)
            steps = ["hold"]
        else:
            try:
                await self._requeuehold_retrying(jid)
                steps = [f"requeuehold ({job.state.value})"]
            except JobAlreadyPending:
                # slurmctld requeued the job itself between our read and our act
                # (NODE_FAIL of a --requeue job, also right after slurmctld restarted): it is
                # pending, or shows its old state for a moment more; hold it once pending
                async def pending() -> bool:
                    return _not_cancelled(await self.get_job(jid)).state is JobState.PENDING

                await self._wait_for(f"job {jid} is pending (slurmctld requeued it)", pending)
                if not (await self.get_job(jid)).held:
                    await self._act_hold(jid)
                steps = ["hold (slurmctld had requeued it)"]

        async def held() -> bool:
            # after requeuehold of a job on a dead node, Slurm shows it COMPLETING (priority 0)
            # until the node is declared DOWN (~SlurmdTimeout); the exclusion can be set then.
            now = _not_cancelled(await self.get_job(jid))
            return now.state in (JobState.PENDING, JobState.COMPLETING) and now.held

        await self._wait_for(f"job {jid} is held", held)
        if job.state in FINISHED_JOB_STATES:
            unmarked_note = await self._mark_held(await self.get_job(jid))
        if unmarked_note:
            steps.append(unmarked_note)
        return steps

    async def _requeuehold_retrying(self, jid: str) -> None:
        """requeuehold, retried while Slurm says the job is still completing."""
        deadline = time.monotonic() + self.verify_timeout
        while True:
            try:
                await self._act_requeuehold(jid)
                return
            except JobCompleting:
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(self.poll_interval)

    async def cancel_job(self, job_id: str) -> MutationResult:
        """Cancel; a job that already ended (or is completing) gives ``changed=False``."""
        jid = validate_job_id(job_id)
        job = await self.get_job(jid)
        if job.state in FINISHED_JOB_STATES or job.state is JobState.COMPLETING:
            return MutationResult(
                target=jid, operation="cancel", changed=False, detail=f"already {job.state.value}"
            )
        await self._act_cancel(jid)

        async def ended() -> bool:
            return (await self.get_job(jid)).state in FINISHED_JOB_STATES | {JobState.COMPLETING}

        await self._wait_for(f"job {jid} has ended", ended)
        return MutationResult(target=jid, operation="cancel", changed=True, detail="cancelled")
