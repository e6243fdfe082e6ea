"""The soak's invariants, each a small class whose ``check`` reads a :class:`History` and
returns its violations (one sentence each). Every check is on recorded events and samples,
never on how long something took: a slow machine slows the soak, it does not fail it.

``INVARIANTS`` lists them in the order the soak reports them (one JSON line each).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .faults import BY_NAME
from .history import History, Sample

# How a recovery ends when resurrect decided to stop the job (a recorded stop).
STOP_OUTCOMES = frozenset({"stopped", "stopped_no_checkpoint"})
# The fault kinds whose stop is the right answer.
STOP_KINDS = frozenset(name for name, k in BY_NAME.items() if k.expect == "stop")
# The kinds that take a node down (slurmd killed): Slurm itself may requeue its jobs.
NODE_LOSS_KINDS = frozenset({"node_loss", "torn_checkpoint", "second_fault"})
# Slurm states of a job that has ended.
ENDED = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
     "BOOT_FAIL", "DEADLINE"}
)  # fmt: skip


class Invariant:
    """One property every soak must keep."""

    name: str = ""
    what: str = ""

    def check(self, history: History) -> list[str]:
        raise NotImplementedError


class OptedInJobsEndWell(Invariant):
    name = "opted_in_jobs_end_well"
    what = (
        "every opted-in job completes with its final parameters equal to the fault-free run's,"
        " or ends with a recorded stop matching an injected application fault or a spent budget"
    )

    def check(self, history: History) -> list[str]:
        found = []
        for job in history.jobs:
            if not job.opted_in:
                continue
            if job.final_state is None:
                found.append(f"job {job.job_id} had not ended when the soak stopped waiting")
            elif job.final_state == "COMPLETED":
                if job.final_sha is None or job.final_sha != job.reference_sha:
                    found.append(
                        f"job {job.job_id} completed with final parameters {job.final_sha}"
                        f" != the fault-free run's {job.reference_sha}"
                    )
            else:
                found.extend(self._stop_problem(history, job.job_id, job.final_state))
        return found

    @staticmethod
    def _stop_problem(history: History, job_id: str, state: str) -> list[str]:
        job = history.job(job_id)
        assert job is not None
        stops = [r for r in history.recoveries_of(job_id) if r.outcome in STOP_OUTCOMES]
        if not stops:
            return [f"job {job_id} ended {state} with no recorded stop (a lost job)"]
        app_fault = any(f.kind in STOP_KINDS for f in history.faults_on(job_id))
        budget_spent = job.restart_count >= job.max_restarts
        if app_fault or budget_spent:
            return []
        return [
            f"job {job_id} was stopped ({stops[-1].fault_class}) with no injected application"
            f" fault and restarts left ({job.restart_count} of {job.max_restarts})"
        ]


class OneRequeuePerFault(Invariant):
    name = "one_requeue_per_fault"
    what = (
        "no job is requeued more often than faults hit it (an attempt whose step an earlier"
        " attempt's srun cancelled, on a node a fault hit, counts against that fault)"
    )

    def check(self, history: History) -> list[str]:
        found = []
        for job in history.jobs:
            restarts = max(
                [job.restart_count]
                + [s.jobs[job.job_id].restarts for s in history.samples if job.job_id in s.jobs]
            )
            hit = history.faults_on(job.job_id)
            faulted = {f.node for f in hit if f.node}
            echoes = sum(1 for lost, _ in job.leftover_cancellations if lost in faulted)
            if restarts > len(hit) + echoes:
                found.append(
                    f"job {job.job_id} was requeued {restarts} times for {len(hit)} faults"
                    + (f" and {echoes} attempt(s) its leftovers ended" if echoes else "")
                )
        return found


class NoJobLeftHeld(Invariant):
    name = "no_job_left_held"
    what = "no job is held when the soak ends"

    def check(self, history: History) -> list[str]:
        last = _last_sample(history.samples)
        if last is None:
            return []
        return [f"job {jid} is held at the end" for jid, s in sorted(last.jobs.items()) if s.held]


class NotOptedInUntouched(Invariant):
    name = "not_opted_in_untouched"
    what = (
        "no job that was not opted in is requeued (but by Slurm itself for a lost node it ran"
        " on), held or drained for"
    )

    def check(self, history: History) -> list[str]:
        found = []
        for job in history.jobs:
            if job.opted_in:
                continue
            seen = [s.jobs[job.job_id] for s in history.samples if job.job_id in s.jobs]
            requeued = job.restart_count > 0 or any(s.restarts > 0 for s in seen)
            # slurmctld requeues a batch job whose node it lost, or whose batch step could not
            # reach it from a cut-off node ("per user/system request")
            lost_node = any(f.kind in SLURM_LOSES_NODE_KINDS for f in history.faults_on(job.job_id))
            if requeued and not lost_node:
                found.append(f"job {job.job_id} (not opted in) was requeued")
            if any(s.held for s in seen):
                found.append(f"job {job.job_id} (not opted in) was held")
            for rec in history.recoveries_of(job.job_id):
                if rec.requeued or rec.drained_nodes:
                    found.append(
                        f"job {job.job_id} (not opted in): recovery {rec.workflow_id} requeued"
                        f" or drained {rec.drained_nodes}"
                    )
        return found


class NoFalseDrain(Invariant):
    name = "no_false_drain"
    what = (
        "every node resurrect drained had an injected node fault on it before the drain (a"
        " partition shorter than the grace, a lossy link, a cut liveness path are not)"
    )

    def check(self, history: History) -> list[str]:
        found = []
        for node, first_seen, since in _drain_episodes(history.samples):
            faulted = [
                f
                for f in history.faults
                if f.skipped is None
                and f.node == node
                and BY_NAME[f.kind].node_fault
                and since <= f.at <= first_seen
            ]
            if not faulted:
                found.append(f"node {node} drained (seen at {first_seen:.1f}) with no fault on it")
        return found


class DrainBudgetKept(Invariant):
    name = "drain_budget_kept"
    what = "resurrect never has more nodes drained than its budget allows, at any sample"

    def check(self, history: History) -> list[str]:
        return [
            f"{len(s.drained)} nodes drained at {s.at:.1f} ({', '.join(sorted(s.drained))}),"
            f" the budget allows {history.drain_limit}"
            for s in history.samples
            if len(s.drained) > history.drain_limit
        ]


class RecoveriesEnd(Invariant):
    name = "recoveries_end"
    what = "every recovery workflow has ended with an outcome when the soak ends"

    def check(self, history: History) -> list[str]:
        return [
            f"recovery {r.workflow_id} is {r.status} with outcome {r.outcome}"
            for r in history.recoveries
            if r.closed_at is None or r.outcome is None
        ]


# goodput parts may differ from the wall time by rounding only
GOODPUT_TOLERANCE_S = 1.0


class GoodputAddsUp(Invariant):
    name = "goodput_adds_up"
    what = "each job's goodput parts add up to its wall time"

    def check(self, history: History) -> list[str]:
        found = []
        for g in history.goodput:
            total = sum(g.parts.values())
            if abs(total - g.wall_s) > max(GOODPUT_TOLERANCE_S, 0.01 * g.wall_s):
                found.append(f"job {g.job_id}: parts add up to {total:.1f} s of {g.wall_s:.1f} s")
        return found


# RSS at the end may exceed RSS after warm-up by this share
RSS_GROWTH_LIMIT = 0.10


class RssStable(Invariant):
    name = "rss_stable"
    what = (
        "each of resurrect's processes alive at the end holds its RSS within 10 % of its RSS"
        " after warm-up"
    )

    def check(self, history: History) -> list[str]:
        found = []
        for life in history.processes:
            if life.ended_at is not None:
                continue
            after = [(t, kb) for t, kb in life.rss_kb if t >= life.started_at + history.warmup_s]
            if len(after) < 2:
                continue
            base, end = after[0][1], after[-1][1]
            if end > base * (1 + RSS_GROWTH_LIMIT):
                found.append(
                    f"{life.part} (pid {life.pid}) grew from {base} KiB to {end} KiB"
                    f" (+{(end / base - 1) * 100:.0f} %)"
                )
        return found


# /proc states of a process that cannot run: stopped, or frozen (uninterruptible in the
# cgroup freezer)
NOT_RUNNING = frozenset({"T", "t", "D", "Z", "X"})
# Fault kinds of a partition: a node left out this long (or for ever) must stay drained.
FOREVER_KINDS = frozenset({"partition_forever"})
# Fault kinds of hosts in namespaces whose node may be drained: only the repair workflow's
# health check may return it to service.
HOST_NODE_KINDS = frozenset(
    {"partition", "partition_one_way", "partition_forever", "host_freeze", "host_crash"}
)
# Faults after which slurmctld may requeue a job on the node itself: the node killed, cut off
# or frozen past SlurmdTimeout, or a batch step unable to reach slurmctld from it.
SLURM_LOSES_NODE_KINDS = NODE_LOSS_KINDS | HOST_NODE_KINDS
# Faults whose node the soak itself, as the operator, resumes once resurrect drained it
# (soak.repair_later): a drain they caused ends without the repair workflow.
OPERATOR_REPAIRED_KINDS = NODE_LOSS_KINDS | {"gpu_fatal"}


def _successor_started(history: History) -> dict[tuple[str, int], float]:
    """(job id, attempt) -> the first sample showing that attempt RUNNING."""
    first: dict[tuple[str, int], float] = {}
    for sample in sorted(history.samples, key=lambda s: s.at):
        for jid, job in sample.jobs.items():
            if job.state == "RUNNING":
                first.setdefault((jid, job.restarts), sample.at)
    return first


class NoJobRunningTwice(Invariant):
    name = "no_job_running_twice"
    what = (
        "no sample shows a rank of an earlier attempt running (alive, neither stopped nor"
        " frozen) while the job's successor attempt is RUNNING"
    )

    def check(self, history: History) -> list[str]:
        found = []
        for sample in history.samples:
            for jid, ranks in sample.old_ranks.items():
                job = sample.jobs.get(jid)
                running = [r for r in ranks if r[2] not in NOT_RUNNING]
                if job is not None and job.state == "RUNNING" and running:
                    attempts = sorted({a for a, _, _ in running})
                    found.append(
                        f"job {jid} attempt {job.restarts} RUNNING at {sample.at:.1f} beside"
                        f" running ranks of attempt(s) {attempts}"
                        f" (pids {[p for _, p, _ in running]})"
                    )
        return found


class NoStaleCheckpointWrite(Invariant):
    name = "no_stale_checkpoint_write"
    what = (
        "no checkpoint file is written after a job's successor attempt started while a rank"
        " of an earlier attempt was still running (seen within a sample's period of the write)"
    )

    def check(self, history: History) -> list[str]:
        started = _successor_started(history)
        samples = sorted(history.samples, key=lambda s: s.at)
        gaps = [b.at - a.at for a, b in itertools.pairwise(samples)]
        period = statistics.median(gaps) if gaps else 2.0
        found = []
        for jid, files in history.checkpoint_files.items():
            for path, mtime in files:
                for sample in samples:
                    if abs(sample.at - mtime) > period:
                        continue
                    running = [r for r in sample.old_ranks.get(jid, []) if r[2] not in NOT_RUNNING]
                    newest = max(
                        (a for (j, a), at in started.items() if j == jid and at <= mtime),
                        default=None,
                    )
                    if newest is not None and any(a < newest for a, _, _ in running):
                        found.append(
                            f"job {jid}: {path} written at {mtime:.1f} after attempt {newest}"
                            f" started, while ranks of an earlier attempt ran"
                        )
                        break
        return found


class HealedNodesReturnByRepair(Invariant):
    name = "healed_node_returned_by_repair"
    what = (
        "a node drained for a cut link, a frozen or a crashed host leaves its drain only"
        " through resurrect's repair workflow (its health check passed: a 'returned' event);"
        " a drain that a later node loss or GPU fault caused is the soak operator's to end"
    )

    def check(self, history: History) -> list[str]:
        found = []
        taken_out = sorted(
            (
                f
                for f in history.faults
                if f.kind in HOST_NODE_KINDS | OPERATOR_REPAIRED_KINDS and f.skipped is None
            ),
            key=lambda f: f.at,
        )
        samples = sorted(history.samples, key=lambda s: s.at)
        for node, first_seen, _ in _drain_episodes(samples):
            # the drain's cause: the last fault that took the node out before it was seen
            cause = next(
                (f for f in reversed(taken_out) if f.node == node and f.at <= first_seen), None
            )
            if cause is None or cause.kind not in HOST_NODE_KINDS:
                continue
            ended = next(
                (s.at for s in samples if s.at > first_seen and node not in s.drained), None
            )
            if ended is None:
                continue  # still drained at the end
            returns = history.returned_by_repair.get(node, [])
            if not any(first_seen - 1 <= t <= ended + 1 for t in returns):
                found.append(
                    f"node {node} drained at {first_seen:.1f} was back in service at"
                    f" {ended:.1f} with no return by the repair workflow"
                )
        return found


class UnhealedPartitionStaysDrained(Invariant):
    name = "unhealed_partition_stays_drained"
    what = "a node cut off until the end is drained at the end, with a reason naming a lost node"

    def check(self, history: History) -> list[str]:
        last = _last_sample(history.samples)
        found = []
        for fault in history.faults:
            if fault.kind not in FOREVER_KINDS or fault.skipped is not None or not fault.node:
                continue
            reason = last.drained.get(fault.node) if last is not None else None
            if reason is None:
                found.append(f"node {fault.node}, cut off for good, is not drained at the end")
            elif "node_lost" not in reason:
                found.append(f"node {fault.node}, cut off for good, is drained for: {reason}")
        return found


INVARIANTS: tuple[Invariant, ...] = (
    OptedInJobsEndWell(),
    OneRequeuePerFault(),
    NoJobLeftHeld(),
    NotOptedInUntouched(),
    NoFalseDrain(),
    DrainBudgetKept(),
    RecoveriesEnd(),
    GoodputAddsUp(),
    RssStable(),
    NoJobRunningTwice(),
    NoStaleCheckpointWrite(),
    HealedNodesReturnByRepair(),
    UnhealedPartitionStaysDrained(),
)


@dataclass(frozen=True)
class Verdict:
    name: str
    what: str
    violations: list[str]

    def as_line(self) -> dict[str, object]:
        return {
            "invariant": self.name,
            "what": self.what,
            "violations": len(self.violations),
            "examples": self.violations[:5],
        }


def check_all(history: History, invariants: Sequence[Invariant] = INVARIANTS) -> list[Verdict]:
    return [Verdict(i.name, i.what, i.check(history)) for i in invariants]


def _last_sample(samples: Sequence[Sample]) -> Sample | None:
    return max(samples, key=lambda s: s.at) if samples else None


def _drain_episodes(samples: Sequence[Sample]) -> list[tuple[str, float, float]]:
    """(node, first sample seeing it drained, end of its previous drain or -inf) for each
    stretch of samples in which a node stays drained."""
    episodes = []
    drained_since: dict[str, float] = {}
    last_free: dict[str, float] = {}
    for sample in sorted(samples, key=lambda s: s.at):
        for node in sample.drained:
            if node not in drained_since:
                drained_since[node] = sample.at
                episodes.append((node, sample.at, last_free.get(node, float("-inf"))))
        for node in list(drained_since):
            if node not in sample.drained:
                del drained_since[node]
                last_free[node] = sample.at
    return episodes
