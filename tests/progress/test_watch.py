"""A job's progress watch: printed lines in; a confirmed hang naming the culprit, or a
straggler decision, out. Stacks come from the real py-spy fixtures."""

from __future__ import annotations

from pathlib import Path

from resurrect.contracts import FaultClass, ProgressPolicy, SignalKind
from resurrect.progress.tracker import ProgressTracker
from resurrect.progress.watch import ProgressWatch
from resurrect.stacks.classify import RankStack
from resurrect.stacks.pyspy_text import parse_pyspy_dump

STACKS = Path(__file__).parent.parent / "fixtures" / "stacks"


def stack(name: str, rank: int, node: str, state: str = "S") -> RankStack:
    text = (STACKS / name).read_text()
    dump = parse_pyspy_dump(text)
    assert dump.pid is not None
    return RankStack(rank, node, dump.pid, state, dump, text)


def hung_ddp_job() -> list[RankStack]:
    return [
        stack("gloo-ddp-victim-rank0-native.txt", 0, "node1"),
        stack("gloo-ddp-stopped-rank1-nonblocking.txt", 1, "node2", state="T"),
    ]


def test_a_stall_is_confirmed_from_stacks_and_names_the_stopped_rank() -> None:
    probes: list[float] = []

    def probe() -> list[RankStack]:
        probes.append(1)
        return hung_ddp_job()

    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), probe)
    for n in range(1, 6):
        for rank in (0, 1):
            watch.observe_line(f"[rank{rank}] step {10 * n}/120 loss 0.5", float(n))
    assert watch.check(5.0 + 4.9) is None and not probes  # within 5 s: not even suspected
    report = watch.check(5.0 + 5.0)
    assert report is not None and probes
    assert report.culprit_ranks == [1] and report.culprit_nodes == ["node2"]
    culprit = report.evidence[0]
    assert culprit.kind is SignalKind.STACK_DUMP and culprit.role == "root"
    assert culprit.fault_class is FaultClass.JOB_HANG and culprit.fields["state"] == "T"
    assert "main (train.py:269)" in culprit.fields["stack"]
    assert "1 rank(s) wait in a collective for rank 1 on node2 (stopped" in report.reason


def test_busy_ranks_dismiss_a_suspicion_and_the_probe_waits_before_looking_again() -> None:
    calls: list[float] = []
    busy = [stack("gloo-ddp-victim-rank0.txt", 0, "node1")]  # python-only: "elsewhere"

    def probe() -> list[RankStack]:
        calls.append(1)
        return busy

    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), probe)
    for n in range(1, 6):
        watch.observe_line(f"step {n} loss 1.0", float(n))
    assert watch.check(20.0) is None and len(calls) == 1
    assert watch.check(25.0) is None and len(calls) == 1  # not before PROBE_EVERY_S
    assert watch.check(35.0) is None and len(calls) == 2


def test_a_checkpoint_save_ten_steps_long_raises_no_hang() -> None:
    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), hung_ddp_job)
    for n in range(1, 6):
        watch.observe_line(f"[rank0] step {n}/100 loss 1.0", float(n))
    watch.checkpoint_activity(5.5)
    assert watch.check(5.5 + 10 * 1.0) is None


def test_rank_prefixed_step_times_find_a_straggler_and_write_the_arithmetic() -> None:
    policy = ProgressPolicy(straggler_duration_s=10)
    watch = ProgressWatch(policy, ProgressTracker(0.0), list)
    decision = None
    for t in range(1, 40):
        for rank, ms in ((0, 100.0), (1, 100.0), (2, 160.0)):
            watch.observe_line(
                f"[rank{rank}]: iteration {t:>8}/    1000 | elapsed time per iteration (ms): {ms}",
                float(t),
            )
        decision = decision or watch.check_straggler(float(t))
    assert decision is not None and decision.action == "notify"
    assert decision.note.startswith("rank 2 is 60% slower than its peers")
    assert "remaining steps" in decision.note and "recompute" in decision.note
    assert watch.check_straggler(50.0) is None  # decided once per job attempt
