"""Self-fencing: the lease renews with send times; once it has run out, the agent kills its
node's ranks of opted-in jobs (by the kernel's word on which job a process is in), and only
those."""

from __future__ import annotations

import asyncio
import os
import signal

from resurrect.config import FencingSettings
from resurrect.contracts import JobInfo, JobState
from resurrect.errors import JobNotFound, SchedulerUnavailable
from resurrect.sensors.node_agent.fence import Lease, SelfFence
from resurrect.stacks.processes import JobRank, RankProcess


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def rank(
    job: str, pid: int, uid: int = 1000, node: str | None = "n1", attempt: str = "0"
) -> JobRank:
    return JobRank(job, attempt, RankProcess(pid, 0, node, "S"), uid=uid, step_node=node)


GONE = {"404"}  # jobs Slurm answers it does not know


def fence_with(  # type: ignore[no-untyped-def]
    ranks: list[JobRank],
    jobs: dict[str, JobInfo],
    clock: Clock,
    ages: dict[int, float] | None = None,
):
    """A fence over ``ranks`` with a lease of 10 s on ``clock``; ``ages``: how long each pid
    has run (those not named: an hour, older than any lease)."""
    killed: list[tuple[int, int]] = []
    ages = {} if ages is None else ages

    async def look_up(job_id: str) -> JobInfo:
        if job_id in GONE:
            raise JobNotFound(job_id)
        if job_id not in jobs:
            raise SchedulerUnavailable("slurmctld is not responding")
        return jobs[job_id]

    fence = SelfFence(
        FencingSettings(enabled=True, lease_s=10),
        "n1",
        Lease(10, clock),
        look_up=look_up,
        opted_in=lambda job: job.comment == "in",
        scan=lambda: ranks,
        kill=lambda pid, sig: killed.append((pid, sig)),
        age_s=lambda pid: ages.get(pid, 3600.0),
    )
    return fence, killed


def job(job_id: str, comment: str, uid: int = 1000) -> JobInfo:
    return JobInfo(job_id=job_id, state=JobState.RUNNING, comment=comment, user_id=uid)


def test_the_lease_renews_with_the_send_time_and_never_goes_back() -> None:
    clock = Clock()
    lease = Lease(10, clock)
    clock.now = 105
    lease.renew(103)  # a heartbeat sent at 103 was acknowledged at 105
    lease.renew(101)  # a late answer to an older one renews nothing
    lease.renew(None)
    clock.now = 113
    assert lease.expired_for() == 0
    clock.now = 114
    assert lease.expired_for() == 1


def test_a_node_in_contact_kills_nothing() -> None:
    clock = Clock()
    fence, killed = fence_with([rank("7", 70)], {"7": job("7", "in")}, clock)
    asyncio.run(fence.learn())
    clock.now += 9
    assert fence.fence_if_expired() is None
    assert killed == []


def test_a_node_cut_off_past_its_lease_kills_its_ranks_of_opted_in_jobs_only() -> None:
    clock = Clock()
    ranks = [
        rank("7", 70),
        rank("7", 71),
        rank("8", 80),  # not opted in
        rank("9", 90, node="n2"),  # another node's (the local cluster shares one /proc)
        rank("7", 72, uid=0),  # not the job owner's process
        rank("10", 100),  # its lookup failed (cut off): what it is cannot be known, fenced
        rank("11", 110, uid=0),  # lookup failed too, but root's: left alone
        rank("7", 999_999_999, node=None),  # no step daemon known, no process of ours
    ]
    jobs = {"7": job("7", "in"), "8": job("8", "out"), "9": job("9", "in")}
    fence, killed = fence_with(ranks, jobs, clock)
    asyncio.run(fence.learn())
    assert set(fence.known) == {"7", "8"}
    clock.now += 10.5
    action = fence.fence_if_expired()
    assert action is not None
    assert action.killed == {"7/0": [70, 71], "10/0": [100]}
    assert sorted(killed) == [(70, signal.SIGKILL), (71, signal.SIGKILL), (100, signal.SIGKILL)]
    assert action.expired_for_s == 0.5


def test_a_rank_of_no_known_node_is_local_when_it_shares_the_agents_network() -> None:
    clock = Clock()
    me = os.getpid()
    fence, killed = fence_with([rank("7", me, node=None)], {"7": job("7", "in")}, clock)
    asyncio.run(fence.learn())
    clock.now += 11
    action = fence.fence_if_expired()
    assert action is not None and action.killed == {"7/0": [me]}
    assert killed == [(me, signal.SIGKILL)]  # (the fake kill records it)


def test_a_lookup_that_fails_is_tried_again_later() -> None:
    clock = Clock()
    jobs: dict[str, JobInfo] = {}
    fence, _ = fence_with([rank("7", 70)], jobs, clock)
    asyncio.run(fence.learn())
    assert fence.known == {}
    jobs["7"] = job("7", "in")
    asyncio.run(fence.learn())
    assert fence.known == {"7": (True, 1000)}


def test_fenced_within_adds_the_clock_rate_check_kill_and_skew_allowances() -> None:
    settings = FencingSettings(
        lease_s=10, clock_rate_error=0.01, check_interval_s=0.5, kill_margin_s=2, clock_skew_s=1
    )
    assert settings.fenced_within_s == 10 * 1.01 + 0.5 + 2 + 1


def test_the_fence_kills_every_process_of_the_job_not_only_its_ranks() -> None:
    """The batch script, srun and a rank's child (here: no rank label) die with the ranks: a
    thawed srun must not print for the old attempt, a writer child must not write."""
    clock = Clock()
    members = [
        JobRank("7", "0", RankProcess(60, None, "n1", "S"), uid=1000, step_node="n1"),  # batch
        JobRank("7", "0", RankProcess(61, None, "n1", "S"), uid=1000, step_node="n1"),  # srun
        rank("7", 70),
        JobRank("7", "0", RankProcess(75, None, "n1", "S"), uid=1000, step_node="n1"),  # child
    ]
    fence, killed = fence_with(members, {"7": job("7", "in")}, clock)
    asyncio.run(fence.learn())
    clock.now += 11
    action = fence.fence_if_expired()
    assert action is not None and action.killed == {"7/0": [60, 61, 70, 75]}
    assert [pid for pid, _ in killed] == [60, 61, 70, 75]


def test_the_agents_fence_scans_every_process_of_its_jobs() -> None:
    from resurrect.stacks.processes import scan_job_processes

    fence = SelfFence(
        FencingSettings(enabled=True),
        "n1",
        Lease(20),
        look_up=lambda job_id: asyncio.sleep(0),  # type: ignore[arg-type,return-value]
        opted_in=lambda job: True,
    )
    assert fence._scan is scan_job_processes


class FakeHandles:
    """Handles on pids as a dict; ``gone``: processes that ended since."""

    def __init__(self) -> None:
        self.open_handles: dict[int, int] = {}
        self.killed: list[int] = []
        self.gone: set[int] = set()

    def open(self, pid: int, scanned_at: int) -> int | None:
        self.open_handles[1000 + pid] = pid
        return 1000 + pid

    def kill(self, handle: int) -> bool:
        pid = self.open_handles[handle]
        if pid in self.gone:
            return False
        self.killed.append(pid)
        return True

    def close(self, handle: int) -> None:
        del self.open_handles[handle]


def test_on_expiry_the_processes_held_by_handle_die_first_then_a_rescan_finds_the_rest() -> None:
    """A thawed host: the kill goes through the handles opened while the lease held (no
    scan in the way); a process that started since is found by the rescan."""
    clock = Clock()
    members = [rank("7", 70), rank("7", 71), rank("8", 80)]
    fence, killed = fence_with(members, {"7": job("7", "in"), "8": job("8", "out")}, clock)
    handles = FakeHandles()
    fence._handles = handles
    asyncio.run(fence.learn())
    assert sorted(handles.open_handles.values()) == [70, 71]  # only what it would kill
    members.append(rank("7", 72))  # started after the last learn
    handles.gone.add(71)  # ended meanwhile: its handle reaches nothing
    clock.now += 11
    action = fence.fence_if_expired()
    assert handles.killed == [70]
    assert killed == [(71, signal.SIGKILL), (72, signal.SIGKILL)]
    assert action is not None and action.killed == {"7/0": [70, 71, 72]}
    fence.disarm()
    assert handles.open_handles == {}


def test_a_process_that_left_the_job_loses_its_handle() -> None:
    clock = Clock()
    members = [rank("7", 70), rank("7", 71)]
    fence, _ = fence_with(members, {"7": job("7", "in")}, clock)
    handles = FakeHandles()
    fence._handles = handles
    asyncio.run(fence.learn())
    members.pop()
    asyncio.run(fence.learn())
    assert list(handles.open_handles.values()) == [70]


def test_a_real_handle_kills_its_process_and_is_never_opened_on_a_later_one() -> None:
    import subprocess

    from resurrect.sensors.node_agent.fence import PidHandles, boot_ticks

    handles = PidHandles()
    before = boot_ticks()
    child = subprocess.Popen(["sleep", "60"])
    try:
        # a scan begun before the process started saw another process with that pid
        assert handles.open(child.pid, before - 1) is None
        handle = handles.open(child.pid, boot_ticks() + 1)
        assert handle is not None
        assert handles.kill(handle)
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert not handles.kill(handle)  # reaped: the handle reaches nothing now
        handles.close(handle)
    finally:
        child.kill()
        child.wait()


def test_a_job_slurm_says_it_does_not_know_is_left_alone() -> None:
    clock = Clock()
    fence, killed = fence_with([rank("404", 40)], {}, clock)
    asyncio.run(fence.learn())
    assert fence.known == {"404": (False, None)} and not fence.unconfirmed
    clock.now += 11
    assert fence.fence_if_expired() is None and killed == []


def test_an_attempt_started_after_the_lease_ran_out_is_not_fenced_for_it() -> None:
    """A healed link: Slurm starts the job's next attempt on the node before the first
    renewal comes back. That attempt was started by a controller that reached the node; it
    is the one a recovery just restarted, and fencing it would end it (the host soak, seed 22:
    job 22's attempt 1 killed 1.6 s after its start on node1, 1 s after node1's partition
    healed). It is fenced only if no renewal comes within a lease of its own start."""
    clock = Clock()
    ages = {220: 1.5, 221: 1.4}
    fence, killed = fence_with([rank("22", 220, attempt="1"), rank("22", 221, attempt="1")],
                               {"22": job("22", "in")}, clock, ages)  # fmt: skip
    asyncio.run(fence.learn())
    clock.now += 48.6  # cut at 100, healed, the attempt started 1.5 s ago
    assert fence.fence_if_expired() is None and killed == []
    clock.now += 9
    ages.update({220: 10.5, 221: 10.4})  # a lease of its own, run out without a renewal
    action = fence.fence_if_expired()
    assert action is not None and action.killed == {"22/1": [220, 221]}


def test_an_attempt_started_after_the_cut_but_before_the_lease_ran_out_dies_at_once() -> None:
    """Slurm started a job on the node 2.8 s after its link was cut (seen in a soak): it
    began before the lease ran out, so the requeue's bound (from the last contact) holds for
    it, and it is fenced the moment the lease runs out, young as it is."""
    clock = Clock()
    fence, killed = fence_with([rank("10", 100)], {}, clock, {100: 8.0})  # lookup fails
    asyncio.run(fence.learn())
    clock.now += 10.5
    action = fence.fence_if_expired()
    assert action is not None and action.killed == {"10/0": [100]}
    assert killed == [(100, signal.SIGKILL)]


def test_a_renewal_within_a_young_attempts_lease_spares_it_for_good() -> None:
    clock = Clock()
    ages = {220: 2.0}
    fence, killed = fence_with([rank("22", 220, attempt="1")], {"22": job("22", "in")}, clock, ages)
    asyncio.run(fence.learn())
    clock.now += 30
    assert fence.fence_if_expired() is None
    fence.lease.renew(clock.now - 0.5)  # the first heartbeat after the heal
    ages[220] = 60.0
    clock.now += 5
    assert fence.fence_if_expired() is None and killed == []


def test_a_fenced_job_stays_fenced_so_a_child_its_old_attempt_starts_dies_too() -> None:
    """A launcher restarting its workers during the kill: the new worker is young, but its
    job was fenced in this expiry, so it dies with the rest."""
    clock = Clock()
    ranks = [rank("7", 70)]
    ages = {70: 40.0}
    fence, killed = fence_with(ranks, {"7": job("7", "in")}, clock, ages)
    asyncio.run(fence.learn())
    clock.now += 11
    assert fence.fence_if_expired() is not None
    ranks[:] = [rank("7", 77)]  # the old one is gone; a worker it started a moment ago
    ages[77] = 0.2
    clock.now += 0.5
    action = fence.fence_if_expired()
    assert action is not None and action.killed == {"7/0": [77]}
    assert [pid for pid, _ in killed] == [70, 77]


def test_a_process_that_outlives_its_sigkill_is_signalled_and_logged_once_per_expiry() -> None:
    """A rank in uninterruptible sleep on a file system the cut took with it (or a zombie its
    step daemon has not reaped) stays after its SIGKILL: the checks that follow, every
    ``check_interval_s`` for as long as the link stays cut, neither signal it again nor report
    it again; a process that took its pid since (another start time) is a new one. Once the
    lease has held again, a next expiry fences anew."""
    clock = Clock()
    ranks = [rank("7", 70), rank("7", 71)]
    starts = {70: 5_000, 71: 5_001}
    fence, killed = fence_with(ranks, {"7": job("7", "in")}, clock)
    fence._started = starts.get
    handles = FakeHandles()  # the handles too: 70 and 71 never leave
    fence._handles = handles
    asyncio.run(fence.learn())
    clock.now += 11
    first = fence.fence_if_expired()
    assert first is not None and first.killed == {"7/0": [70, 71]}
    for _ in range(100):  # 50 s more of checks, the processes still there
        clock.now += 0.5
        assert fence.fence_if_expired() is None
    assert handles.killed == [70, 71] and killed == [] and list(fence.actions) == [first]
    starts[71] = 9_000  # 71 was reaped; a process of the old attempt took its pid
    handles.gone.add(71)
    again = fence.fence_if_expired()
    assert again is not None and again.killed == {"7/0": [71]} and killed == [(71, signal.SIGKILL)]
    fence.lease.renew(clock.now)  # the link is back: the next expiry fences anew
    assert fence.fence_if_expired() is None
    clock.now += 11
    anew = fence.fence_if_expired()
    assert anew is not None and anew.killed == {"7/0": [70, 71]}


def test_a_real_zombie_is_killed_once_through_its_handle() -> None:
    """The kernel's side of the above: SIGKILL through a pidfd reaches a zombie (it is not
    reaped until its parent waits), and its start time stays readable, so the fence tells it
    is the process it signalled already."""
    import subprocess
    import time

    from resurrect.sensors.node_agent.fence import PidHandles

    clock = Clock()
    child = subprocess.Popen(["sleep", "60"])
    try:
        fence, killed = fence_with([rank("7", child.pid)], {"7": job("7", "in")}, clock)
        fence._handles = PidHandles()
        asyncio.run(fence.learn())
        clock.now += 11
        action = fence.fence_if_expired()
        assert action is not None and action.killed == {"7/0": [child.pid]}
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z":  # dead, not yet waited for
            assert time.monotonic() < deadline
            time.sleep(0.01)
        clock.now += 0.5
        assert fence.fence_if_expired() is None and killed == []
        fence.disarm()
    finally:
        child.kill()
        child.wait()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_a_gone_process_makes_no_job_old() -> None:
    """A young attempt's short-lived process that ended (its age unreadable) does not get the
    attempt fenced."""
    clock = Clock()
    ranks = [rank("22", 220), rank("22", 229)]
    fence, killed = fence_with(ranks, {"22": job("22", "in")}, clock, {220: 1.0})
    fence._age_s = lambda pid: {220: 1.0}.get(pid)  # 229 has ended
    asyncio.run(fence.learn())
    clock.now += 30
    assert fence.fence_if_expired() is None and killed == []


def test_a_real_process_age_comes_from_the_kernel() -> None:
    import subprocess

    from resurrect.sensors.node_agent.fence import process_age_s

    child = subprocess.Popen(["sleep", "60"])
    try:
        age = process_age_s(child.pid)
        assert age is not None and 0 <= age < 5
        assert process_age_s(os.getpid()) > age  # type: ignore[operator]
    finally:
        child.kill()
        child.wait()
    assert process_age_s(child.pid) is None


def test_a_young_attempts_process_held_by_handle_is_not_killed_through_it() -> None:
    clock = Clock()
    fence, killed = fence_with([rank("22", 220, attempt="1")], {"22": job("22", "in")}, clock,
                               {220: 1.0})  # fmt: skip
    handles = FakeHandles()
    fence._handles = handles
    asyncio.run(fence.learn())
    assert list(handles.open_handles.values()) == [220]
    clock.now += 30
    assert fence.fence_if_expired() is None
    assert handles.killed == [] and killed == []


async def test_a_lookup_waiting_on_a_controller_out_of_reach_holds_back_no_check() -> None:
    """A job's first lookup hangs (the node was cut off just after the job started there) and
    the lease runs out meanwhile: the next check kills the job's processes; it does not wait
    for the lookup (the host slice, under load, fenced 3.8 s past the lease behind one)."""
    clock, killed = Clock(), []
    asked, answer = asyncio.Event(), asyncio.Event()

    async def hanging_look_up(job_id: str) -> JobInfo:
        asked.set()
        await answer.wait()
        raise SchedulerUnavailable("slurmctld is not responding")

    fence = SelfFence(
        FencingSettings(enabled=True, lease_s=10, check_interval_s=0.01),
        "n1",
        Lease(10, clock),
        look_up=hanging_look_up,
        opted_in=lambda job: job.comment == "in",
        scan=lambda: [rank("7", 700)],
        kill=lambda pid, sig: killed.append((pid, sig)),
        age_s=lambda pid: 3600.0,
    )
    clock.now = 100.0
    fence.lease.renew(100.0)
    stop = asyncio.Event()
    running = asyncio.create_task(fence.run(stop))
    await asyncio.wait_for(asked.wait(), 5)  # the lookup is under way, and stays so
    clock.now = 111.0  # the lease ran out 1 s ago
    async with asyncio.timeout(5):
        while not killed:
            await asyncio.sleep(0.01)
    assert killed[0] == (700, signal.SIGKILL) and not answer.is_set()
    stop.set()
    await asyncio.wait_for(running, 5)
