"""A job's progress watch: printed lines in; a confirmed hang naming the culprit, or a
straggler decision, out. Stacks come from the real py-spy fixtures."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

from resurrect.contracts import Evidence, FaultClass, ProgressPolicy, SignalKind
from resurrect.progress.hang import STARTUP_EARLY_LOOK_S
from resurrect.progress.straggler import RestartDecision
from resurrect.progress.tracker import ProgressTracker
from resurrect.progress.watch import PROBE_EVERY_S, ProgressWatch, straggler_evidence
from resurrect.sensors.node_agent.gpu_activity import GpuActivity, RankGpu
from resurrect.stacks.classify import RankStack
from resurrect.stacks.flight_recorder import LastCollective
from resurrect.stacks.pyspy_text import parse_pyspy_dump
from resurrect.stacks.sampling import RankWait

STACKS = Path(__file__).parent.parent / "fixtures" / "stacks"


def stack(name: str, rank: int, node: str, state: str = "S") -> RankStack:
    text = (STACKS / name).read_text()
    dump = parse_pyspy_dump(text)
    assert dump.pid is not None
    return RankStack(rank, node, dump.pid, state, dump, text)


class FakeRanks:
    """The ranks' stacks from fixtures (``probes``: how often they were read); waits as a
    test sets them."""

    def __init__(self, stacks: Callable[[], list[RankStack]] = list) -> None:
        self._stacks = stacks
        self.probes = 0
        self.waiting: list[RankWait] = []
        self.gpu_activity: list[RankGpu] = []

    def stacks(self) -> list[RankStack]:
        self.probes += 1
        return self._stacks()

    def waits(self) -> list[RankWait]:
        return self.waiting

    def evidence(self) -> list[Evidence]:
        return []

    def gpus(self) -> list[RankGpu]:
        return self.gpu_activity


def run_now(probe: Callable[[], list[RankStack]]) -> Future[list[RankStack]]:
    """Read the stacks at once (the sensor reads them in the background)."""
    done: Future[list[RankStack]] = Future()
    done.set_result(probe())
    return done


def hung_ddp_job() -> list[RankStack]:
    return [
        stack("gloo-ddp-victim-rank0-native.txt", 0, "node1"),
        stack("gloo-ddp-stopped-rank1-nonblocking.txt", 1, "node2", state="T"),
    ]


def test_a_stall_is_confirmed_from_stacks_and_names_the_stopped_rank() -> None:
    ranks = FakeRanks(hung_ddp_job)
    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), ranks, run_probe=run_now)
    for n in range(1, 6):
        for rank in (0, 1):
            watch.observe_line(f"[rank{rank}] step {10 * n}/120 loss 0.5", float(n))
    assert watch.check(5.0 + 4.9) is None and not ranks.probes  # within 5 s: not even suspected
    report = watch.check(5.0 + 5.0)
    assert report is not None and ranks.probes
    assert report.culprit_ranks == [1] and report.culprit_nodes == ["node2"]
    culprit = report.evidence[0]
    assert culprit.kind is SignalKind.STACK_DUMP and culprit.role == "root"
    assert culprit.fault_class is FaultClass.JOB_HANG and culprit.fields["state"] == "T"
    assert "main (train.py:269)" in culprit.fields["stack"]
    assert "1 rank(s) wait in a collective for rank 1 on node2 (stopped" in report.reason


def test_busy_ranks_dismiss_a_suspicion_and_the_probe_waits_before_looking_again() -> None:
    busy = [stack("gloo-ddp-victim-rank0.txt", 0, "node1")]  # python-only: "elsewhere"
    ranks = FakeRanks(lambda: busy)
    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), ranks, run_probe=run_now)
    for n in range(1, 6):
        watch.observe_line(f"step {n} loss 1.0", float(n))
    assert watch.check(20.0) is None and ranks.probes == 1
    assert watch.check(25.0) is None and ranks.probes == 1  # not before PROBE_EVERY_S
    assert watch.check(35.0) is None and ranks.probes == 2


def saving_ddp_job() -> list[RankStack]:
    """Rank 0 busy writing the checkpoint; rank 1 waits for it in the save's barrier."""
    return [
        stack("gloo-ddp-victim-rank0.txt", 0, "node1", state="R"),
        stack("gloo-ddp-victim-rank2-native.txt", 1, "node2"),
    ]


def test_a_checkpoint_save_ten_steps_long_raises_no_hang() -> None:
    ranks = FakeRanks(saving_ddp_job)
    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), ranks, run_probe=run_now)
    for n in range(1, 6):
        watch.observe_line(f"[rank0] step {n}/100 loss 1.0", float(n))
    watch.checkpoint_activity(5.5)
    for second in range(1, 11):  # ten steps' time: an early look, and nothing decisive
        assert watch.check(5.5 + second) is None
    assert ranks.probes == 1


def test_a_rank_stopped_during_a_save_is_a_hang_after_the_train_allowance() -> None:
    """A save may take its 900 s, but peers waiting in a collective for a stopped rank are
    a hang at once: the early look after the train allowance (5 s here) confirms it."""
    watch = ProgressWatch(
        ProgressPolicy(), ProgressTracker(0.0), FakeRanks(hung_ddp_job), run_probe=run_now
    )
    for n in range(1, 6):
        watch.observe_line(f"[rank0] step {n}/100 loss 1.0", float(n))
    watch.checkpoint_activity(5.5)
    assert watch.check(5.5 + 4.9) is None
    report = watch.check(5.5 + 5.0)
    assert report is not None and report.culprit_ranks == [1]
    assert "in phase checkpoint" in report.reason and "checkpoint allowance 900 s" in report.reason


def test_a_rank_stopped_while_starting_is_a_hang_at_the_start_up_early_look() -> None:
    """Rank 1 stopped while importing; rank 0 waits for it at the rendezvous (real py-spy
    dumps). Start-up may take its 30 minutes, but this is a hang at the early look."""
    ranks = FakeRanks(
        lambda: [
            stack("rendezvous-victim-rank0.txt", 0, "node1"),
            stack("rendezvous-stopped-rank1-nonblocking.txt", 1, "node2", state="T"),
        ]
    )
    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), ranks, run_probe=run_now)
    watch.observe_line("[rank0] world 2, steps 1..300, restart count 0", 1.0)  # not progress
    assert watch.check(STARTUP_EARLY_LOOK_S - 0.1) is None and not ranks.probes
    report = watch.check(STARTUP_EARLY_LOOK_S)
    assert report is not None and report.culprit_ranks == [1] and report.culprit_nodes == ["node2"]
    assert "in phase startup" in report.reason and "startup allowance 1800 s" in report.reason


def test_a_long_compilation_at_start_up_is_looked_at_again_later_not_called_a_hang() -> None:
    busy = [stack("gloo-ddp-victim-rank0.txt", 0, "node1", state="R")]  # python: "elsewhere"
    ranks = FakeRanks(lambda: busy)
    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), ranks, run_probe=run_now)
    assert watch.check(STARTUP_EARLY_LOOK_S) is None and ranks.probes == 1
    assert watch.check(2 * STARTUP_EARLY_LOOK_S - 0.1) is None and ranks.probes == 1
    assert watch.check(2 * STARTUP_EARLY_LOOK_S) is None and ranks.probes == 2


def megatron_steps(
    watch: ProgressWatch, step_ms: dict[int, float], *, steps: int, total: int = 1000
) -> RestartDecision | None:
    """Feed ``steps`` seconds of Megatron-LM iteration lines, one per rank a second, each
    rank taking ``step_ms``; the first straggler decision."""
    decision = None
    for t in range(1, steps):
        for rank, ms in step_ms.items():
            watch.observe_line(
                f"[rank{rank}]: iteration {t:>8}/{total:>8} | elapsed time per iteration (ms): {ms}",
                float(t),
            )
        decision = decision or watch.check_straggler(float(t))
    return decision


def test_rank_prefixed_step_times_find_a_straggler_and_write_the_arithmetic() -> None:
    policy = ProgressPolicy(straggler_duration_s=10)
    watch = ProgressWatch(policy, ProgressTracker(0.0), FakeRanks())
    decision = megatron_steps(watch, {0: 100.0, 1: 100.0, 2: 160.0}, steps=40)
    assert decision is not None and decision.action == "notify"
    assert decision.note.startswith("rank 2 is 60% slower than its peers")
    assert "remaining steps" in decision.note and "recompute" in decision.note
    assert watch.check_straggler(50.0) is None  # decided once per job attempt


def test_the_rank_its_peers_wait_for_is_the_straggler_and_restart_pays_off() -> None:
    policy = ProgressPolicy(straggler_duration_s=20, straggler_action="restart")
    ranks = FakeRanks()
    watch = ProgressWatch(policy, ProgressTracker(0.0), ranks)
    now, decision, tick = 0.0, None, 0
    while now < 60 and decision is None:
        now += 0.25
        tick += 1
        if tick % 4 == 0:  # a progress line every second: 10 steps of 0.1 s
            watch.observe_line(f"[rank0] step {tick * 10 // 4}/20000 loss 1.0", now)
        # rank 1 (node2) is stopped 3/4 of the time; rank 0 then waits for it
        slow_now = tick % 4 != 0
        ranks.waiting = [
            RankWait(0, "node1", "S", waiting=slow_now),
            RankWait(1, "node2", "T" if slow_now else "S", waiting=False),
        ]
        watch.sample(now)
        decision = watch.check_straggler(now)
    assert decision is not None and decision.action == "restart"
    assert decision.finding.node == "node2"
    assert 20 <= now <= 20 + 11  # the duration, plus filling the 10 s sampling window
    assert re.match(r"rank 1 on node2 is 3\d\d% slower than its peers", decision.note)
    assert "its peers wait for it" in decision.note and ": restart (its node" in decision.note


def test_waits_during_a_save_are_not_sampled() -> None:
    ranks = FakeRanks()
    ranks.waiting = [RankWait(0, "n1", "S", True), RankWait(1, "n2", "S", False)]
    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), ranks)
    watch.checkpoint_activity(1.0)
    watch.sample(2.0)
    assert watch.stragglers is not None and not watch.stragglers.waits


def test_a_straggler_decision_becomes_root_evidence_naming_rank_and_node() -> None:
    policy = ProgressPolicy(straggler_duration_s=10)
    watch = ProgressWatch(policy, ProgressTracker(0.0), FakeRanks())
    decision = megatron_steps(watch, {0: 100.0, 1: 150.0}, steps=30)
    assert decision is not None
    [evidence] = straggler_evidence(decision)
    assert evidence.role == "root" and evidence.fault_class is FaultClass.JOB_STRAGGLER
    assert evidence.rank == 1 and evidence.fields["action"] == "notify"
    assert evidence.rule == "progress.straggler.step_times"


def silent_while_its_stacks_are_read(released: threading.Event) -> ProgressWatch:
    """A hung DDP job's watch after five steps and a silence, at the check (t=20) that
    starts reading its ranks' stacks in the background; the read ends once ``released``."""

    def slow() -> list[RankStack]:
        released.wait(10)
        return hung_ddp_job()

    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), FakeRanks(slow))
    for n in range(1, 6):
        watch.observe_line(f"[rank0] step {n}/100 loss 1.0", float(n))
    assert watch.check(20.0) is None  # started reading, did not wait
    return watch


def read_to_the_end(watch: ProgressWatch) -> None:
    """Wait until the background read of the stacks is over."""
    assert watch._probe is not None
    watch._probe.result(timeout=10)


def test_the_stacks_are_read_in_the_background_and_judged_at_the_next_check() -> None:
    released = threading.Event()
    watch = silent_while_its_stacks_are_read(released)
    assert watch.check(20.2) is None  # still reading
    released.set()
    read_to_the_end(watch)
    report = watch.check(20.5)
    assert report is not None and report.culprit_ranks == [1]


def test_progress_that_resumes_while_the_stacks_are_read_discards_them() -> None:
    released = threading.Event()
    watch = silent_while_its_stacks_are_read(released)
    watch.observe_line("[rank0] step 6/100 loss 1.0", 20.1)
    released.set()
    read_to_the_end(watch)
    assert watch.check(20.6) is None and watch.check(20.7) is None


def nccl_job(culprit: str) -> Callable[[], list[RankStack]]:
    return lambda: [
        stack("nccl-victim-barrier-CONSTRUCTED.txt", 0, "gpu-1"),
        stack(culprit, 1, "gpu-2"),
    ]


def trained_watch(ranks: FakeRanks) -> ProgressWatch:
    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), ranks, run_probe=run_now)
    for n in range(1, 6):
        watch.observe_line(f"[rank0] step {n}/100 loss 1.0", float(n))
    return watch


def test_a_culprit_that_is_not_stopped_must_look_the_same_twice() -> None:
    watch = trained_watch(FakeRanks(nccl_job("nccl-culprit-cuda-sync-CONSTRUCTED.txt")))
    assert watch.check(11.0) is None  # first look: could be working
    assert watch.check(11.5) is None  # the second look comes a second later
    report = watch.check(12.0)
    assert report is not None and report.culprit_nodes == ["gpu-2"]
    assert report.verdict is not None and report.verdict.culprits[0].place == "cuda"


def test_a_culprit_that_moves_between_looks_is_working_not_hung() -> None:
    looks = iter(
        [
            "nccl-culprit-cuda-sync-CONSTRUCTED.txt",
            "nccl-culprit-dataloader-CONSTRUCTED.txt",
        ]
    )
    watch = trained_watch(FakeRanks(lambda: nccl_job(next(looks))()))
    assert watch.check(11.0) is None
    assert watch.check(12.0) is None  # moved: working; the next look waits PROBE_EVERY_S
    assert watch.next_probe_at == 12.0 + PROBE_EVERY_S


def test_the_jobs_last_recovery_time_is_measured_and_used() -> None:
    policy = ProgressPolicy(straggler_duration_s=10, straggler_action="restart")
    # the previous attempt was reported at t=-50; this attempt's first step came at t=1
    watch = ProgressWatch(policy, ProgressTracker(0.0), FakeRanks(), recovery_began_at=-50.0)
    decision = megatron_steps(watch, {0: 100.0, 1: 200.0}, steps=30, total=100_000)
    assert watch.measured_recovery_s() == 51.0
    assert decision is not None and "restart cost = 51 s recovery (measured)" in decision.note


def busy_gpus(clocks: dict[int, int], reasons: tuple[str, ...] = ()) -> list[RankGpu]:
    """Each rank's busy GPU at the given SM clock (rank 2's with ``reasons``)."""
    return [
        RankGpu(
            rank,
            f"node{rank}",
            GpuActivity(
                rank,
                f"0000:{rank:02x}:00",
                None,
                98,
                600.0,
                mhz,
                1980,
                reasons if rank == 2 else (),
            ),
        )
        for rank, mhz in clocks.items()
    ]


def test_a_gpu_whose_clock_lags_its_peers_names_its_rank_a_straggler() -> None:
    policy = ProgressPolicy(straggler_duration_s=10)
    ranks = FakeRanks()
    ranks.gpu_activity = busy_gpus({0: 1980, 1: 1965, 2: 1200}, ("hw_thermal_slowdown",))
    watch = ProgressWatch(policy, ProgressTracker(0.0), ranks)
    now, decision = 0.0, None
    while now < 30 and decision is None:
        now += 0.25
        if now % 1 == 0:
            watch.observe_line(f"[rank0] step {int(now) * 10}/20000 loss 1.0", now)
        watch.sample(now)
        decision = watch.check_straggler(now)
    assert decision is not None and decision.finding.source == "gpu_clocks"
    assert (decision.finding.rank, decision.finding.node) == (2, "node2")
    assert 10 <= now <= 12  # the policy duration after the first busy readings
    assert re.match(r"rank 2 on node2 is 6\d% slower than its peers", decision.note)
    assert "its GPU's SM clock against its peers'" in decision.note
    [hardware] = watch.gpu_evidence([decision.finding.rank])
    assert hardware.rule == "gpu.clocks.hw_slowdown" and hardware.host == "node2"


def test_idle_gpus_say_nothing_about_stragglers() -> None:
    ranks = FakeRanks()
    ranks.gpu_activity = [
        RankGpu(g.rank, g.node, replace(g.activity, utilisation_pct=0))
        for g in busy_gpus({0: 1980, 1: 210})
    ]
    watch = ProgressWatch(ProgressPolicy(straggler_duration_s=10), ProgressTracker(0.0), ranks)
    for tick in range(1, 200):
        watch.sample(tick * 0.25)
    assert watch.stragglers is not None and not watch.stragglers.gpu_clocks


def test_a_hang_report_carries_the_agents_word_on_the_culprits_gpu() -> None:
    ranks = FakeRanks(hung_ddp_job)
    ranks.gpu_activity = [
        RankGpu(1, "node2", GpuActivity(1, "0000:3b:00", None, 0, 90.0, 1410, 1980,
                                        ("hw_power_brake_slowdown",)), gres_verified=True),
    ]  # fmt: skip
    watch = ProgressWatch(ProgressPolicy(), ProgressTracker(0.0), ranks, run_probe=run_now)
    for n in range(1, 6):
        watch.observe_line(f"[rank0] step {n}/100 loss 1.0", float(n))
        watch.sample(float(n))
    report = watch.check(20.0)
    assert report is not None and report.culprit_ranks == [1]
    gpu = [e for e in report.evidence if e.rule == "gpu.clocks.hw_slowdown"]
    assert [(e.rank, e.host, e.source) for e in gpu] == [(1, "node2", "node_agent")]


def nccl_job_with_rank1_behind() -> list[RankStack]:
    """CONSTRUCTED: every main thread in a CUDA sync (the stacks confirm nothing); the ranks'
    CONSTRUCTED Flight Recorder records show rank 1 never entered all-reduce #12."""
    out = []
    for rank, seq in ((0, 12), (1, 11), (2, 12)):
        base = stack("nccl-culprit-cuda-sync-CONSTRUCTED.txt", rank, f"gpu-{rank}")
        last = LastCollective(rank, "0", seq, "nccl:all_reduce", "started")
        out.append(replace(base, pid=2000 + rank, collectives=(last,)))
    return out


def test_flight_recorder_confirms_an_nccl_hang_and_names_the_rank_behind() -> None:
    watch = ProgressWatch(
        ProgressPolicy(), ProgressTracker(0.0), FakeRanks(nccl_job_with_rank1_behind),
        run_probe=run_now,
    )  # fmt: skip
    for n in range(1, 6):
        watch.observe_line(f"step {10 * n}/120 loss 0.5", float(n))
    assert watch.check(10.0) is None  # confirmed: looked at once more a second later
    report = watch.check(11.0)
    assert report is not None and report.culprit_ranks == [1]
    assert report.culprit_nodes == ["gpu-1"]
    culprit = report.evidence[0]
    assert culprit.role == "root" and culprit.rank == 1 and culprit.fields["place"] == "behind"
    [behind] = [e for e in report.evidence if e.rule == "flight_recorder.behind"]
    assert (behind.rank, behind.host) == (1, "gpu-1")
    assert behind.fields["seq"] == "11" and behind.fields["peers_seq"] == "12"
    assert behind.fields["collective"] == "nccl:all_reduce"
    assert "wait for rank 1 on gpu-1" in report.reason


def test_a_hang_report_says_when_flight_recorder_is_not_available() -> None:
    def probe() -> list[RankStack]:
        return [
            replace(s, flight_recorder_note=f"no dump at /tmp/nccl_trace_rank_{s.rank}")
            for s in hung_ddp_job()
        ]

    watch = ProgressWatch(
        ProgressPolicy(), ProgressTracker(0.0), FakeRanks(probe), run_probe=run_now
    )
    for n in range(1, 6):
        watch.observe_line(f"step {10 * n}/120 loss 0.5", float(n))
    report = watch.check(10.0)
    assert report is not None and report.culprit_ranks == [1]
    [note] = [e for e in report.evidence if e.rule == "flight_recorder.unavailable"]
    assert "no dump at /tmp/nccl_trace_rank_0" in note.text
