"""Watching one job attempt's progress: lines in, a confirmed hang (with its culprit) out.

:class:`ProgressWatch` is what a sensor keeps per followed job. It reads progress from each
printed line (:mod:`.parser`), takes checkpoint activity as progress, and on
:meth:`ProgressWatch.check` turns a suspicion (:func:`~.hang.suspect_hang`) into a stack probe
of the job's ranks and a verdict (:func:`~.hang.confirm_hang`). A probe that does not confirm
is repeated no sooner than ``PROBE_EVERY_S`` (or the allowance, if longer): py-spy pauses the
ranks it reads. :meth:`ProgressWatch.sample` samples who waits (cheap, no pause) during
training, and :meth:`ProgressWatch.check_straggler` decides on a straggler once per attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from resurrect.contracts import Evidence, EvidenceRole, FaultClass, ProgressPolicy, SignalKind
from resurrect.progress.hang import HangSuspicion, confirm_hang, suspect_hang
from resurrect.progress.parser import ProgressParser, shipped_parser
from resurrect.progress.straggler import RestartDecision, StragglerDetector, restart_decision
from resurrect.progress.tracker import ProgressTracker
from resurrect.rules.text import truncate
from resurrect.sensors.node_agent.gpu_activity import RankGpu, slowdown_evidence
from resurrect.stacks.classify import RankStack, StackVerdict, judge
from resurrect.stacks.collect import RankAccess
from resurrect.stacks.flight_recorder import flight_recorder_evidence

log = logging.getLogger(__name__)
PROBE_EVERY_S = 10.0
SECOND_LOOK_S = 1.0  # a stall confirmed by stacks is looked at once more, this much later
SAMPLE_EVERY_S = 0.25
GPU_SAMPLE_EVERY_S = 1.0
# What a restart is assumed to cost before one was measured (requeue, start-up, load).
ASSUMED_RECOVERY_S = 120.0
STACK_FIELD_CHARS = 3000


@dataclass(frozen=True, slots=True)
class HangReport:
    """A confirmed hang: why, the stack evidence, the culprit ranks and their nodes."""

    reason: str
    suspicion: HangSuspicion
    verdict: StackVerdict | None
    evidence: list[Evidence]

    @property
    def culprit_ranks(self) -> list[int]:
        if self.verdict is None:
            return []
        return [c.rank for c in self.verdict.culprits if c.rank is not None]

    @property
    def culprit_nodes(self) -> list[str]:
        if self.verdict is None:
            return []
        return list(dict.fromkeys(c.node for c in self.verdict.culprits if c.node))


ProbeRunner = Callable[[Callable[[], list[RankStack]]], "Future[list[RankStack]]"]
_PROBES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="stack-probe")


def _in_background(probe: Callable[[], list[RankStack]]) -> Future[list[RankStack]]:
    return _PROBES.submit(probe)


@dataclass
class ProgressWatch:
    policy: ProgressPolicy
    tracker: ProgressTracker
    ranks: RankAccess
    parser: ProgressParser = field(default_factory=shipped_parser)
    next_probe_at: float = 0.0
    stragglers: StragglerDetector | None = None
    total_steps: int | None = None
    last_checkpoint_at: float | None = None
    straggler_reported: bool = False
    sampled_at: float = float("-inf")
    gpus_sampled_at: float = float("-inf")
    # The latest GPU activity of the ranks (their nodes' agents' word on their GPUs).
    last_gpus: list[RankGpu] = field(default_factory=list)
    run_probe: ProbeRunner = field(default=_in_background)
    _probe: Future[list[RankStack]] | None = None
    _first_look: tuple[object, ...] | None = None
    # When the recovery that started this attempt began (the previous attempt's report):
    # from it to this attempt's first step is the job's measured recovery time.
    recovery_began_at: float | None = None

    def __post_init__(self) -> None:
        if self.stragglers is None:
            self.stragglers = StragglerDetector(self.policy)

    def observe_line(self, raw: str | bytes, now: float) -> bool:
        event = self.parser.parse(raw)
        if event is None:
            return False
        if event.total is not None and event.phase == "train":
            self.total_steps = event.total
        if self.stragglers is not None and event.rank is not None and event.step_time_s:
            self.stragglers.observe(event.rank, event.step_time_s, now, node=event.host)
        return self.tracker.observe(event, now)

    def checkpoint_activity(self, now: float) -> None:
        self.last_checkpoint_at = now
        self.tracker.observe_checkpoint_activity(now)

    def sample(self, now: float) -> None:
        """Sample who waits for whom (training phase only: during a save or an evaluation,
        ranks wait for rank 0 or the evaluator by design)."""
        if self.stragglers is None or self.tracker.phase != "train":
            return
        if now - self.sampled_at < SAMPLE_EVERY_S:
            return
        self.sampled_at = now
        for wait in self.ranks.waits():
            self.stragglers.observe_wait(wait.rank, wait.waiting, now, node=wait.node)
        if now - self.gpus_sampled_at >= GPU_SAMPLE_EVERY_S:
            self.gpus_sampled_at = now
            self.last_gpus = self.ranks.gpus()
            for item in self.last_gpus:
                gpu = item.activity
                if gpu.sm_clock_mhz is not None and gpu.utilisation_pct is not None:
                    self.stragglers.observe_gpu(
                        item.rank, gpu.sm_clock_mhz, gpu.utilisation_pct, now, item.node
                    )

    def gpu_evidence(self, ranks: list[int]) -> list[Evidence]:
        """The latest hardware slowdowns (or lost GPUs) of these ranks' GPUs."""
        return slowdown_evidence([g for g in self.last_gpus if g.rank in ranks])

    def measured_recovery_s(self) -> float | None:
        """The last recovery of this job, report to first step again, if it was seen."""
        first = self.tracker.first_step_at
        if self.recovery_began_at is None or first is None:
            return None
        return max(0.0, first - self.recovery_began_at)

    def check_straggler(self, now: float) -> RestartDecision | None:
        """A straggler decision (notify or restart, with its arithmetic), once per job."""
        if self.stragglers is None or self.straggler_reported:
            return None
        finding = self.stragglers.check(now, self.tracker.step_time_s)
        if finding is None:
            return None
        self.straggler_reported = True
        last = self.tracker.last_step
        remaining = self.total_steps - last if self.total_steps and last is not None else None
        since = now - (self.last_checkpoint_at or self.tracker.started_at)
        pace = finding.step_time_s or self.tracker.step_time_s  # steps done at today's pace
        measured = self.measured_recovery_s()
        return restart_decision(
            finding,
            self.policy,
            remaining_steps=remaining,
            recovery_s=ASSUMED_RECOVERY_S if measured is None else measured,
            recovery_measured=measured is not None,
            steps_since_checkpoint=int(since / pace) if pace else 0,
        )

    def check(self, now: float) -> HangReport | None:
        """A confirmed hang, or None (no suspicion, or not confirmed, or the stacks are still
        being read: the probe runs in the background, so one job's slow dump never holds up
        the sensor; its result is judged at the next check, if the job is still silent)."""
        if self._probe is None:
            suspicion = suspect_hang(self.tracker, self.policy, now)
            if suspicion is None:
                self._first_look = None
            if suspicion is None or now < self.next_probe_at:
                return None
            self._probe = self.run_probe(self.ranks.stacks)
        if not self._probe.done():
            return None
        probe, self._probe = self._probe, None
        suspicion = suspect_hang(self.tracker, self.policy, now)
        if suspicion is None:  # progress came back while the stacks were read
            return None
        try:
            stacks = probe.result()
        except Exception:  # an unexpected failure of the probe: judge without stacks
            log.exception("reading the ranks' stacks failed")
            stacks = []
        verdict = judge(stacks) if stacks else None
        confirmation = confirm_hang(
            suspicion,
            self.policy,
            ranks_seen=verdict.ranks_seen if verdict else 0,
            ranks_in_collective=len(verdict.victims) if verdict else 0,
            ranks_missing=len(verdict.missing) if verdict else 0,
            culprit_stopped=verdict.culprit_stopped if verdict else False,
        )
        if not confirmation.hung:
            self._first_look = None
            self.next_probe_at = now + max(PROBE_EVERY_S, suspicion.threshold_s)
            return None
        if verdict is not None and verdict.victims and not verdict.culprit_stopped:
            # a culprit that is not stopped may be working (rank 0 alone in an unannounced
            # evaluation while the others wait): a stall shows the same picture twice
            seen = verdict.signature()
            if seen != self._first_look:
                again = SECOND_LOOK_S if self._first_look is None else PROBE_EVERY_S
                self._first_look = seen
                self.next_probe_at = now + again
                return None
        reason = confirmation.reason
        if verdict is not None and verdict.culprits:
            reason += f"; {verdict.summary}"
        evidence = stack_evidence(stacks, verdict)
        if verdict is not None:  # the agent's word on the culprits' GPUs, as it was lately
            culprits = [c.rank for c in verdict.culprits if c.rank is not None]
            evidence.extend(self.gpu_evidence(culprits))
        evidence.extend(flight_recorder_evidence_of(stacks))  # ranks behind, or why not
        evidence.extend(self.ranks.evidence())  # NCCL RAS, or why not
        return HangReport(reason, suspicion, verdict, evidence)


def flight_recorder_evidence_of(stacks: list[RankStack]) -> list[Evidence]:
    """The ranks' Flight Recorder dumps compared: who is behind its peers, or why nothing."""
    if not stacks:
        return []
    records = [c for s in stacks for c in s.collectives]
    nodes = {s.rank: s.node for s in stacks if s.rank is not None}
    notes = [s.flight_recorder_note for s in stacks if s.flight_recorder_note]
    return flight_recorder_evidence(records, nodes, notes)


def stack_evidence(stacks: list[RankStack], verdict: StackVerdict | None) -> list[Evidence]:
    """One Evidence per rank: the culprit(s) as root evidence of job.hang, victims as
    diagnostic; each with its place, state and (bounded) main-thread stack."""
    if verdict is None:
        return []
    culprit_pids = {c.pid for c in verdict.culprits}
    victim_pids = {v.pid for v in verdict.victims}
    by_pid = {s.pid: s for s in stacks}
    out: list[Evidence] = []
    for place in sorted(verdict.places, key=lambda p: (p.pid not in culprit_pids, p.rank or 0)):
        stack = by_pid.get(place.pid)
        main = stack.dump.main_thread() if stack and stack.dump else None
        frames = (
            "\n".join(str(f) for f in main.frames[:40]) if main else (stack.error if stack else "")
        )
        culprit = place.pid in culprit_pids
        role: EvidenceRole = "root" if culprit else "diagnostic"
        what = "culprit" if culprit else ("victim" if place.pid in victim_pids else "rank")
        out.append(
            Evidence(
                kind=SignalKind.STACK_DUMP,
                text=truncate(
                    f"{what}: rank {place.rank} on {place.node} (pid {place.pid},"
                    f" state {stack.state if stack else '?'}): {place.place} at {place.frame}"
                ),
                rule="stacks." + place.place,
                role=role,
                fault_class=FaultClass.JOB_HANG if culprit else None,
                host=place.node,
                rank=place.rank,
                fields={
                    "place": place.place,
                    "pid": str(place.pid),
                    "state": stack.state if stack else "?",
                    "stack": truncate(frames, STACK_FIELD_CHARS),
                },
                confidence=0.9 if culprit else None,
            )
        )
    return out


def straggler_evidence(decision: RestartDecision) -> list[Evidence]:
    """The straggler as root evidence of job.straggler, with the decision's arithmetic."""
    finding = decision.finding
    return [
        Evidence(
            kind=SignalKind.PROGRESS,
            text=truncate(decision.note),
            rule=f"progress.straggler.{finding.source}",
            role="root",
            fault_class=FaultClass.JOB_STRAGGLER,
            host=finding.node,
            rank=finding.rank,
            fields={
                "slowdown": f"{finding.slowdown:.3f}",
                "slow_for_s": f"{finding.slow_for_s:.0f}",
                "slowdown_cost_s": f"{decision.slowdown_cost_s:.0f}",
                "restart_cost_s": f"{decision.restart_cost_s:.0f}",
                "action": decision.action,
            },
            confidence=0.7,
        )
    ]
