"""The discrete-event simulation of a cluster's training jobs through interruptions.

Events (a heap ordered by time, then insertion): a job becomes ready to run (submitted, or
requeued after a recovery), an attempt ends (training done) or is interrupted, a drained
node comes back repaired. A job's attempt is computed in one step, not one event per
checkpoint: with training ``tau`` and save ``Ts`` between checkpoints, an attempt that
trains ``x`` seconds has kept ``floor(x / (tau + Ts)) * tau`` of training.

An interruption (drawn per node-hour while the job holds its nodes, start-up included; or
replayed from a recording) costs, in order: the training since the last save (recompute),
detection, recovery, and the queue until the job holds nodes again, then its start-up. A
fault of a :data:`~.model.DRAIN_CLASSES` class marks its node faulty; the node is drained
(out for ``repair_s``) while the drain budget allows (``drain_budget`` per
``drain_window_s``), else it stays in service, excluded from this job only, and fails the
next job placed on it ``bad_node_s`` after that job's start-up. Nodes are given lowest
index first, to the waiting jobs in the order they became ready, a job skipping the queue
when the ones before it do not fit (backfill).

Scenario ``manual``: no automated recovery: a person notices after ``manual_response_s``
(detection), then drains the faulty node (no budget) and requeues.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field

from resurrect.goodput.simulate.model import (
    DRAIN_CLASSES,
    LOST_PARTS,
    Mode,
    Phase,
    RecordedFault,
    ScenarioResult,
    SimInputs,
    SimJob,
    WhatIf,
)

_READY, _END, _FAULT, _REPAIRED = range(4)
# A job still training this long after the period began counts as unfinished (its wall time
# runs to the horizon).
HORIZON_PERIODS = 10
HORIZON_SLACK_S = 7 * 86400.0


@dataclass
class _Fault:
    after_s: float  # attempt start until the fault
    fault_class: str
    lost_work_s: float | None = None
    node: int | None = None  # the faulty node, when known


@dataclass
class _Job:
    index: int
    spec: SimJob
    interval_s: float
    rng: random.Random
    remaining_s: float
    replayed: deque[RecordedFault] = field(default_factory=deque)
    first_start: float | None = None
    end: float | None = None
    requeued_at: float | None = None
    started_at: float = 0.0
    startup_s: float = 0.0
    nodes: list[int] = field(default_factory=list)
    excluded: set[int] = field(default_factory=set)
    token: int = 0
    kept_s: float = 0.0
    lost: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LOST_PARTS, 0.0))
    pending: RecordedFault | None = None  # the replayed fault being recovered from
    fault: _Fault | None = None  # the fault that ends the running attempt


class Simulation:
    """One scenario of one replication (deterministic for a seed)."""

    def __init__(self, inputs: SimInputs, knobs: WhatIf, mode: Mode, seed: int) -> None:
        self.inputs = inputs
        self.knobs = knobs
        self.mode = mode
        self.total_rate_s = sum(inputs.rates_per_node_hour.values()) / 3600.0
        self.classes = sorted(inputs.rates_per_node_hour)
        self.weights = [inputs.rates_per_node_hour[c] for c in self.classes]
        applied = mode == "what-if"
        interval = knobs.checkpoint_interval_s if applied else None
        self.interval_changed = interval is not None
        replay = inputs.replay
        self.jobs = [
            _Job(
                index=index,
                spec=spec,
                interval_s=interval or spec.checkpoint_interval_s,
                # the same draws per job in every scenario; a simulation, not a secret
                rng=random.Random(f"{seed}/{spec.job_id}/{index}"),  # noqa: S311
                remaining_s=spec.work_s,
                replayed=deque(replay.faults.get(spec.job_id, [])) if replay else deque(),
            )
            for index, spec in enumerate(inputs.jobs)
        ]
        self.spares = knobs.spares if applied else 0
        self.free = set(range(inputs.cluster_nodes + self.spares))
        self.faulty: dict[int, str] = {}  # node -> the class of its fault, until repaired
        self.in_repair: set[int] = set()
        self.drain_budget = (
            knobs.drain_budget
            if applied and knobs.drain_budget is not None
            else inputs.drain_budget
        )
        self.drained_at: deque[float] = deque()
        self.events: list[tuple[float, int, int, int, int]] = []
        self.sequence = 0
        self.waiting: list[int] = []
        self.now = 0.0
        self.horizon = inputs.period_s * HORIZON_PERIODS + HORIZON_SLACK_S
        self.counts = {"interruptions": 0, "drains": 0, "refused": 0}

    # ------------------------------------------------------------------ events
    def _push(self, at: float, kind: int, index: int, token: int = 0) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (at, self.sequence, kind, index, token))

    def run(self) -> ScenarioResult:
        for index, job in enumerate(self.jobs):
            self._push(job.spec.submit_s, _READY, index)
        while self.events:
            at, _, kind, index, token = heapq.heappop(self.events)
            if at > self.horizon:
                break
            self.now = at
            if kind == _READY:
                self.waiting.append(index)
            elif kind == _REPAIRED:
                self.faulty.pop(index, None)
                self.in_repair.discard(index)
                self.free.add(index)
            elif token != self.jobs[index].token:
                continue  # an attempt that already ended
            elif kind == _END:
                self._finish(self.jobs[index])
            else:
                self._interrupted(self.jobs[index])
            self._place_waiting()
        return self._result()

    # ------------------------------------------------------------------ placement
    def _place_waiting(self) -> None:
        if not self.waiting or not self.free:
            return
        still: list[int] = []
        for index in self.waiting:
            job = self.jobs[index]
            usable = len(self.free) - len(job.excluded & self.free)
            if usable < job.spec.nodes:
                still.append(index)
                continue
            chosen = [n for n in sorted(self.free) if n not in job.excluded][: job.spec.nodes]
            self.free.difference_update(chosen)
            self._start(index, job, chosen)
        self.waiting = still

    def _start(self, index: int, job: _Job, nodes: list[int]) -> None:
        job.nodes = nodes
        job.started_at = self.now
        if job.first_start is None:
            job.first_start = self.now
        if job.requeued_at is not None:
            job.lost["queue"] += self.now - job.requeued_at
            job.requeued_at = None
        job.startup_s = self._startup(job)
        job.token += 1
        training = self._training_needed(job)
        fault = self._next_fault(job)
        job.pending = None
        if fault is None or fault.after_s >= job.startup_s + training:
            job.fault = None
            self._push(self.now + job.startup_s + training, _END, index, job.token)
        else:
            job.fault = fault
            self._push(self.now + fault.after_s, _FAULT, index, job.token)

    def _startup(self, job: _Job) -> float:
        replay = self.inputs.replay
        if replay is not None:
            if job.pending is not None:
                return job.pending.next_startup_s
            if job.first_start == self.now and job.spec.job_id in replay.first_startup_s:
                return replay.first_startup_s[job.spec.job_id]
        return self._draw(job, "startup")

    def _training_needed(self, job: _Job) -> float:
        """Wall seconds after start-up to train ``remaining_s``, saves between intervals."""
        saves = max(0, math.ceil(job.remaining_s / job.interval_s) - 1)
        return job.remaining_s + saves * job.spec.save_s

    def _next_fault(self, job: _Job) -> _Fault | None:
        bad = [n for n in job.nodes if n in self.faulty]
        if bad:
            return _Fault(job.startup_s + self.inputs.bad_node_s, self.faulty[bad[0]], node=bad[0])
        if self.inputs.replay is not None:
            if not job.replayed:
                return None
            recorded = job.replayed[0]
            return _Fault(recorded.after_s, recorded.fault_class, recorded.lost_work_s)
        if self.total_rate_s <= 0:
            return None
        after = job.rng.expovariate(self.total_rate_s * job.spec.nodes)
        fault_class = job.rng.choices(self.classes, self.weights)[0]
        return _Fault(after, fault_class, node=job.rng.choice(job.nodes))

    # ------------------------------------------------------------------ outcomes
    def _finish(self, job: _Job) -> None:
        saves = self._training_needed(job) - job.remaining_s
        job.lost["startup"] += job.startup_s
        job.lost["save"] += saves
        job.kept_s += job.remaining_s
        job.remaining_s = 0.0
        job.end = self.now
        self.free.update(job.nodes)
        job.nodes = []

    def _interrupted(self, job: _Job) -> None:
        fault = job.fault
        assert fault is not None  # a _FAULT event is only pushed with its fault
        self.counts["interruptions"] += 1
        ran = self.now - job.started_at
        startup = min(ran, job.startup_s)
        job.lost["startup"] += startup
        trained = ran - startup
        cycle = job.interval_s + job.spec.save_s
        if fault.lost_work_s is not None and not self.interval_changed:  # the recorded loss
            lost = min(trained, fault.lost_work_s)
            job.lost["recompute"] += lost
            kept = (trained - lost) * job.interval_s / cycle  # the rest: saves it kept
            job.lost["save"] += trained - lost - kept
        else:
            cycles = math.floor(trained / cycle)
            kept = cycles * job.interval_s
            job.lost["save"] += cycles * job.spec.save_s
            job.lost["recompute"] += trained - cycles * cycle
        kept = min(kept, job.remaining_s)
        job.kept_s += kept
        job.remaining_s -= kept
        self._handle_node(job, fault)
        self.free.update(n for n in job.nodes if n not in self.in_repair)
        job.nodes = []
        replayed = job.replayed.popleft() if job.replayed and fault.node is None else None
        job.pending = replayed
        detection = self._detection(job, replayed.detection_s if replayed else None)
        recovery = replayed.recovery_s if replayed else self._draw(job, "recovery")
        queue = replayed.queue_s if replayed else self._draw(job, "queue")
        job.lost["detection"] += detection
        job.lost["recovery"] += recovery
        job.requeued_at = self.now + detection + recovery
        if job.remaining_s <= 0:
            job.end = self.now
            return
        self._push(job.requeued_at + queue, _READY, job.index)

    def _detection(self, job: _Job, recorded: float | None) -> float:
        if self.mode == "manual":
            return self.knobs.manual_response_s
        if self.mode == "what-if" and self.knobs.detect_s is not None:
            return self.knobs.detect_s
        return recorded if recorded is not None else self._draw(job, "detection")

    def _handle_node(self, job: _Job, fault: _Fault) -> None:
        node = fault.node
        if node is None or fault.fault_class not in DRAIN_CLASSES:
            return
        self.faulty[node] = fault.fault_class
        window_start = self.now - self.inputs.drain_window_s
        while self.drained_at and self.drained_at[0] <= window_start:
            self.drained_at.popleft()
        if self.mode == "manual" or len(self.drained_at) < self.drain_budget:
            self.drained_at.append(self.now)
            self.counts["drains"] += 1
            self.in_repair.add(node)
            self._push(self.now + self.inputs.repair_s, _REPAIRED, node)
        else:
            self.counts["refused"] += 1
            job.excluded.add(node)  # still faulty, in service for other jobs

    def _draw(self, job: _Job, phase: Phase) -> float:
        samples = self.inputs.samples_s.get(phase)
        return job.rng.choice(samples) if samples else 0.0

    # ------------------------------------------------------------------ result
    def _result(self) -> ScenarioResult:
        wall = kept = saved = 0.0
        lost_node_s = dict.fromkeys(LOST_PARTS, 0.0)
        finished: list[float] = []
        unfinished = 0
        for job in self.jobs:
            if job.first_start is None:
                unfinished += 1
                continue
            end = job.end if job.end is not None else self.horizon
            wall += (end - job.first_start) * job.spec.nodes
            kept += job.kept_s * job.spec.nodes
            saved += job.lost["save"] * job.spec.nodes
            for part, seconds in job.lost.items():
                lost_node_s[part] += seconds * job.spec.nodes
            if job.end is not None and job.remaining_s <= 0:
                finished.append(job.end - job.spec.submit_s)
            else:
                unfinished += 1
        gpus = self.inputs.gpus_per_node
        return ScenarioResult(
            scenario=self.mode,
            knobs=self.knobs,
            goodput=round(kept / wall, 5) if wall > 0 else None,
            goodput_with_saves=round((kept + saved) / wall, 5) if wall > 0 else None,
            lost_gpu_hours=round((wall - kept) * gpus / 3600, 3),
            lost_node_hours_by_part={k: round(v / 3600, 3) for k, v in lost_node_s.items()},
            time_to_train_s=round(sum(finished) / len(finished), 1) if finished else None,
            jobs_finished=len(finished),
            jobs_unfinished=unfinished,
            interruptions=self.counts["interruptions"],
            drains=self.counts["drains"],
            drains_refused=self.counts["refused"],
        )


def simulate_once(inputs: SimInputs, knobs: WhatIf, mode: Mode, seed: int) -> ScenarioResult:
    """One replication of one scenario."""
    return Simulation(inputs, knobs, mode, seed).run()


def average(results: list[ScenarioResult]) -> ScenarioResult:
    """The mean of replications of one scenario (counts rounded to the nearest integer)."""
    first = results[0]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    goodputs = [r.goodput for r in results if r.goodput is not None]
    with_saves = [r.goodput_with_saves for r in results if r.goodput_with_saves is not None]
    trains = [r.time_to_train_s for r in results if r.time_to_train_s is not None]
    return first.model_copy(
        update={
            "goodput": round(mean(goodputs), 5) if goodputs else None,
            "goodput_with_saves": round(mean(with_saves), 5) if with_saves else None,
            "lost_gpu_hours": round(mean([r.lost_gpu_hours for r in results]), 3),
            "lost_node_hours_by_part": {
                part: round(mean([r.lost_node_hours_by_part[part] for r in results]), 3)
                for part in first.lost_node_hours_by_part
            },
            "time_to_train_s": round(mean(trains), 1) if trains else None,
            "jobs_finished": round(mean([r.jobs_finished for r in results])),
            "jobs_unfinished": round(mean([r.jobs_unfinished for r in results])),
            "interruptions": round(mean([r.interruptions for r in results])),
            "drains": round(mean([r.drains for r in results])),
            "drains_refused": round(mean([r.drains_refused for r in results])),
        }
    )
