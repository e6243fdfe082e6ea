"""The recovery's reads of the job and its nodes, and the waits that make them trustworthy.

Two waits come before a recovery assesses anything:

- **a second source** (:meth:`EvidenceReads.await_second_source`): a node agent's silence
  alone changes nothing while Slurm still runs the job on nodes it sees; the recovery waits
  for another report, re-reading the job after pauses that grow with the wait, until the
  attempt ends or Slurm marks a silent node. History stays bounded: after
  ``SECOND_SOURCE_CHECKS_PER_RUN`` re-reads the wait continues as new.
- **a not-responding node read twice** (:meth:`EvidenceReads.read_not_responding_again`,
  the 0.2.1 patch ``NOT_RESPONDING_READ_TWICE``): a node unavailable without being DOWN is
  Slurm's word only when reads at least the grace apart all show it.

The workflow (``workflows/recovery.py``) owns the reports and the phase; this module reads,
waits and notes. docs/versioning.md says how a change to these commands lands.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from resurrect.contracts import (
        Evidence,
        Interruption,
        JobState,
        RecoveryContext,
        RecoveryPhase,
    )
    from resurrect.contracts import (
        RecoveryOutcomeKind as Kind,
    )
    from resurrect.evidence_trust import (
        UnavailabilityReads,
        silence_awaiting_a_second_source,
        silence_only,
        slurm_marked,
    )

# The second source's re-reads of the job: a report with evidence of its own (the
# follower's, the agent's) wakes the wait at once, but the Slurm watcher's reports carry none
# (the job's state is read here), so the re-reads are how the wait sees the attempt end or
# Slurm mark a node. The first after this pause, then a quarter of the time waited so far, at
# most the maximum: one scheduler read per waiting job per pause (after heartbeats lost for a
# whole fleet, every running job waits: 10,000 jobs cost 1,000 reads a second for the first
# half minute, then fewer as the pauses grow).
SECOND_SOURCE_FIRST_PAUSE_S = 10.0
SECOND_SOURCE_MAX_PAUSE_S = 600.0
# History stays bounded: after this many re-reads the wait continues as new.
SECOND_SOURCE_CHECKS_PER_RUN = 500
# Patch of 0.2.1 (docs/versioning.md): a node unavailable without being DOWN (NOT_RESPONDING,
# as every node is for a moment after slurmctld restarts) is Slurm's word only when reads at
# least the grace apart all show it; the recovery reads again after the grace to know. Asked
# once, before the first activity. Without it (recoveries 0.2.0 started) one read was enough.
NOT_RESPONDING_READ_TWICE = "not-responding-read-twice"
# At most this many reads after the grace before the assessment: a node still not lasting
# after them (a new one each time) is not Slurm's word.
NOT_RESPONDING_REREADS = 3


def evidence_of_reports(interruption: Interruption, later: list[Interruption]) -> list[Evidence]:
    """The evidence of the first report and of every later one, each item once."""
    reported: list[Evidence] = []
    for report in [interruption, *later]:
        for item in report.evidence:
            if item not in reported:
                reported.append(item)
    return reported


class EvidenceReads:
    """A recovery's reads of its job: one call reads once (``read_once``, the gather
    activity); ``reported`` is the workflow's list of later reports (it appends to it);
    notes go to ``notes``; ``set_phase`` shows the wait."""

    def __init__(
        self,
        read_once: Callable[[Interruption], Awaitable[RecoveryContext | None]],
        reported: list[Interruption],
        notes: list[str],
        set_phase: Callable[[RecoveryPhase], None],
    ) -> None:
        self._read_once = read_once
        self._reported = reported
        self._notes = notes
        self._set_phase = set_phase
        # reads of the job's nodes (the NOT_RESPONDING_READ_TWICE patch; None without it),
        # timed by the seconds of the pauses that ran out between them: a pause is a timer
        # started after the read before it returned, so reads that far apart are at least
        # that far apart on any clock
        self._unavailability: UnavailabilityReads | None = None
        self._paused_s = 0.0
        self._noted_not_responding: set[str] = set()

    def read_twice(self) -> None:
        """Take the NOT_RESPONDING_READ_TWICE patch's reads (the workflow asked for it)."""
        self._unavailability = UnavailabilityReads()

    async def read(self, interruption: Interruption) -> RecoveryContext | None:
        """One reading of the job and its nodes; None when it fails. With the
        NOT_RESPONDING_READ_TWICE patch, the nodes' states are taken into the reads."""
        bundle = await self._read_once(interruption)
        if bundle is not None and self._unavailability is not None:
            self._unavailability.observe(
                bundle.nodes, self._paused_s, bundle.not_responding_grace_s
            )
        return bundle

    # a node agent's silence alone ----------------------------------------------------------
    async def await_second_source(
        self, interruption: Interruption, bundle: RecoveryContext
    ) -> RecoveryContext | Kind:
        """Change nothing while node agents' silence alone reports a job that Slurm still
        runs on nodes it sees (:func:`silence_awaiting_a_second_source`): wait for another
        report, re-reading the job after pauses that grow with the wait, until the attempt
        ends or Slurm marks a silent node. The evidence to recover with, or the outcome when
        the attempt completed (or could no longer be read) with nothing confirmed."""
        reported = evidence_of_reports(interruption, self._reported)
        silent = silence_awaiting_a_second_source(
            reported, bundle.job, self.slurm_marked(bundle), interruption.restart_count
        )
        if not silent:
            return bundle
        self._set_phase(RecoveryPhase.AWAITING_SECOND_SOURCE)
        job_id = interruption.job_id
        self._notes.append(
            f"only the silence of the node agent on {', '.join(silent)} reports job {job_id},"
            " which Slurm still runs there: nothing is changed until a second source agrees"
            " (the attempt ending, Slurm marking the node, another report)"
        )
        began = workflow.now()
        checks = 0
        while silent:
            waited_s = (workflow.now() - began).total_seconds()
            pause_s = min(SECOND_SOURCE_MAX_PAUSE_S, max(SECOND_SOURCE_FIRST_PAUSE_S, waited_s / 4))
            try:
                await workflow.wait_condition(
                    partial(self._reported_more_than, len(self._reported)),
                    timeout=timedelta(seconds=pause_s),
                )
            except TimeoutError:
                self._paused_s += pause_s
            read = await self.read(interruption)
            if read is None:
                return Kind.JOB_UNKNOWN
            bundle = read
            reported = evidence_of_reports(interruption, self._reported)
            silent = silence_awaiting_a_second_source(
                reported, bundle.job, self.slurm_marked(bundle), interruption.restart_count
            )
            checks += 1
            self._note_not_responding_once(bundle)
            if silent and checks >= SECOND_SOURCE_CHECKS_PER_RUN:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(interruption.model_copy(update={"evidence": reported}))
        waited = f"after {(workflow.now() - began).total_seconds():.0f} s"
        job = bundle.job
        if (
            job.state is JobState.COMPLETED
            and job.restart_count == interruption.restart_count
            and all(silence_only(e) for e in reported)
        ):
            self._notes.append(
                f"job {job_id} completed {waited} while only its node agent's silence reported"
                " it: nothing was changed"
            )
            return Kind.JOB_COMPLETED
        self._notes.append(
            f"a second source {waited}: job {job.state.value}, {len(reported)} evidence"
        )
        return bundle

    def _reported_more_than(self, count: int) -> bool:
        return len(self._reported) > count

    def slurm_marked(self, bundle: RecoveryContext) -> set[str]:
        """The nodes of ``bundle`` that Slurm marks lost (:func:`slurm_marked`): with the
        NOT_RESPONDING_READ_TWICE patch, not responding counts only once it lasted."""
        reads = self._unavailability
        return slurm_marked(bundle.nodes, None if reads is None else reads.lasting)

    # a not-responding node read twice ------------------------------------------------------
    def _note_not_responding_once(self, bundle: RecoveryContext) -> None:
        """Say once per node that a read showed it unavailable without being DOWN, and that
        this is not Slurm's word yet (the NOT_RESPONDING_READ_TWICE patch)."""
        reads = self._unavailability
        if reads is None:
            return
        pending = reads.pending(self._paused_s, bundle.not_responding_grace_s)
        fresh = [n for n in pending if n not in self._noted_not_responding]
        if not fresh:
            return
        self._noted_not_responding.update(fresh)
        self._notes.append(
            f"{', '.join(fresh)} unavailable but not DOWN in one read: Slurm's word only if"
            f" a read {bundle.not_responding_grace_s:g} s later still shows it (a controller"
            " that has just restarted shows every node not responding until it registers)"
        )

    async def read_not_responding_again(
        self, interruption: Interruption, bundle: RecoveryContext
    ) -> RecoveryContext | Kind:
        """With the NOT_RESPONDING_READ_TWICE patch: while the last read shows nodes
        unavailable without being DOWN that have not lasted the grace, wait out the grace
        and read again (at most NOT_RESPONDING_REREADS times). The bundle to assess: the
        job as ``bundle`` has it (a job being torn down may list fewer nodes a moment later),
        the nodes as the last read shows them, and those that lasted
        (``lasting_unavailable``); JOB_UNKNOWN when a read fails."""
        reads = self._unavailability
        if reads is None:
            return bundle
        for _ in range(NOT_RESPONDING_REREADS):
            pending = reads.pending(self._paused_s, bundle.not_responding_grace_s)
            if not pending:
                break
            pause_s = max(pending.values())
            self._note_not_responding_once(bundle)
            await workflow.sleep(timedelta(seconds=pause_s))
            self._paused_s += pause_s
            read = await self.read(interruption)
            if read is None:
                return Kind.JOB_UNKNOWN
            bundle = bundle.model_copy(update={"nodes": read.nodes})
        return bundle.model_copy(update={"lasting_unavailable": sorted(reads.lasting)})
