from __future__ import annotations

from support.builders import OPT_IN

from resurrect.config import ResurrectConfig
from resurrect.contracts import FaultClass, Interruption, JobInfo, JobState
from resurrect.errors import SchedulerUnavailable
from resurrect.sensors.slurm_watcher import SlurmWatcher
from resurrect.testing import FakeScheduler

CONFIG = ResurrectConfig.model_validate({"cluster": {"name": "c1"}})


class Collector:
    def __init__(self) -> None:
        self.reports: list[Interruption] = []
        self.fail = 0

    async def __call__(self, interruption: Interruption) -> str:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("temporal down")
        self.reports.append(interruption)
        return interruption.workflow_id


def running(
    job_id: str, comment: str = OPT_IN, nodes: tuple[str, ...] = ("node1", "node2")
) -> JobInfo:
    return JobInfo(job_id=job_id, state=JobState.RUNNING, comment=comment, nodes=list(nodes))


async def watching(job_id: str) -> tuple[FakeScheduler, Collector, SlurmWatcher]:
    """A watcher that has seen opted-in job ``job_id`` running on node1 and node2."""
    s = FakeScheduler.with_nodes(4)
    s.jobs[job_id] = running(job_id)
    report = Collector()
    watcher = SlurmWatcher(s, CONFIG, report)
    await watcher.poll_once()
    return s, report, watcher


async def test_failed_states_of_opted_in_jobs_are_reported_once() -> None:
    s = FakeScheduler.with_nodes(4)
    s.jobs["1"] = running("1").model_copy(update={"state": JobState.NODE_FAIL})
    s.jobs["2"] = running("2", comment="").model_copy(update={"state": JobState.FAILED})
    s.jobs["3"] = running("3").model_copy(update={"state": JobState.COMPLETED})
    s.jobs["4"] = running("4").model_copy(update={"state": JobState.OUT_OF_MEMORY})
    report = Collector()
    watcher = SlurmWatcher(s, CONFIG, report)
    await watcher.poll_once()
    await watcher.poll_once()
    assert [(r.job_id, r.fault_hint) for r in report.reports] == [
        ("1", FaultClass.NODE_LOST),
        ("4", FaultClass.MEMORY_HOST_OOM),
    ]
    assert report.reports[0].workflow_id == "recover/c1/1/0"


async def test_running_job_on_a_down_node_is_reported_with_the_suspect() -> None:
    s = FakeScheduler.with_nodes(4)
    s.jobs["5"] = running("5")
    report = Collector()
    watcher = SlurmWatcher(s, CONFIG, report)
    assert await watcher.poll_once() == []
    s.nodes["node2"] = s.nodes["node2"].model_copy(
        update={"state": "DOWN", "flags": ["NOT_RESPONDING"]}
    )
    [found] = await watcher.poll_once()
    assert found.suspect_nodes == ["node2"] and found.fault_hint is FaultClass.NODE_LOST


async def test_requeue_by_slurmctld_is_an_interruption_of_the_attempt_we_saw() -> None:
    s, _, watcher = await watching("6")
    s.jobs["6"] = s.jobs["6"].model_copy(
        update={"state": JobState.PENDING, "restart_count": 1, "state_reason": "BeginTime"}
    )
    [found] = await watcher.poll_once()
    assert found.restart_count == 0 and "requeued" in found.reason


async def test_report_failure_is_retried_next_poll() -> None:
    s = FakeScheduler.with_nodes(2)
    s.jobs["7"] = running("7").model_copy(update={"state": JobState.TIMEOUT})
    report = Collector()
    report.fail = 1
    watcher = SlurmWatcher(s, CONFIG, report)
    assert await watcher.poll_once() == []
    assert len(await watcher.poll_once()) == 1


async def test_scheduler_down_raises_for_the_run_loop_to_back_off() -> None:
    s = FakeScheduler.with_nodes(2)
    s.fail_next = 1
    watcher = SlurmWatcher(s, CONFIG, Collector())
    try:
        await watcher.poll_once()
    except SchedulerUnavailable:
        pass
    else:  # pragma: no cover
        raise AssertionError("expected SchedulerUnavailable")
    assert await watcher.poll_once() == []


async def test_not_responding_must_persist_and_waits_out_a_controller_restart() -> None:
    s = FakeScheduler.with_nodes(4)
    s.jobs["8"] = running("8")
    watcher = SlurmWatcher(s, CONFIG, Collector())
    nr = s.nodes["node1"].model_copy(update={"flags": ["NOT_RESPONDING"]})
    nodes = [nr, *[n for name, n in s.nodes.items() if name != "node1"]]
    jobs = list(s.jobs.values())
    assert watcher.detect(jobs, nodes, now=100.0) == []  # just went quiet
    assert watcher.detect(jobs, nodes, now=102.0) == []  # within the 4 s grace
    [found] = watcher.detect(jobs, nodes, now=104.5)
    assert found.suspect_nodes == ["node1"]
    # after the controller was unreachable, NOT_RESPONDING alone is ignored for a while
    fresh = SlurmWatcher(s, CONFIG, Collector())
    fresh.controller_unreachable(now=200.0)
    assert fresh.detect(jobs, nodes, now=200.0) == []
    assert fresh.detect(jobs, nodes, now=210.0) == []
    assert len(fresh.detect(jobs, nodes, now=231.0)) == 1
    # DOWN counts at once, even then
    down = [n.model_copy(update={"state": "DOWN"}) if n.name == "node1" else n for n in nodes]
    other = SlurmWatcher(s, CONFIG, Collector())
    other.controller_unreachable(now=300.0)
    assert len(other.detect(jobs, down, now=300.0)) == 1


async def test_held_or_completing_job_is_not_a_new_node_loss() -> None:
    s = FakeScheduler.with_nodes(4)
    s.nodes["node2"] = s.nodes["node2"].model_copy(update={"state": "DOWN"})
    s.jobs["9"] = running("9").model_copy(
        update={"state": JobState.COMPLETING, "held": True, "restart_count": 1}
    )
    assert await SlurmWatcher(s, CONFIG, Collector()).poll_once() == []


LAUNCH_FAILED = {"held": True, "state_reason": "launch failed requeued held"}


async def test_a_requeued_job_whose_next_launch_fails_is_an_interruption_of_that_attempt() -> None:
    s, _, watcher = await watching("10")
    pending = {"state": JobState.PENDING, "nodes": [], "restart_count": 1}
    s.jobs["10"] = s.jobs["10"].model_copy(update=pending)
    [requeued] = await watcher.poll_once()  # slurmctld requeued the attempt we saw run
    assert await watcher.poll_once() == []  # pending: still in the view, nothing new
    # the next launch fails on node3 at once: requeued again and held, never seen running
    s.jobs["10"] = s.jobs["10"].model_copy(
        update={
            "state": JobState.COMPLETING,
            "nodes": ["node3"],
            "restart_count": 2,
            **LAUNCH_FAILED,
        }
    )
    [failed] = await watcher.poll_once()
    assert (requeued.restart_count, failed.restart_count) == (0, 1)
    assert failed.suspect_nodes == ["node3"] and failed.fault_hint is FaultClass.NODE_LOST
    assert "launch on node3 failed" in failed.reason
    s.jobs["10"] = s.jobs["10"].model_copy(update={"state": JobState.PENDING, "nodes": []})
    assert await watcher.poll_once() == []  # the same held attempt: reported once


async def test_a_failed_launch_seen_only_once_pending_names_no_node() -> None:
    s, _, watcher = await watching("11")
    s.jobs["11"] = s.jobs["11"].model_copy(
        update={"state": JobState.PENDING, "nodes": [], "restart_count": 2, **LAUNCH_FAILED}
    )
    [failed] = await watcher.poll_once()
    assert failed.restart_count == 1 and failed.suspect_nodes == [] and failed.fault_hint is None


async def test_a_requeued_job_leaves_the_view_when_it_runs_again_or_its_watch_ends() -> None:
    s = FakeScheduler.with_nodes(4)
    s.jobs["12"] = running("12")
    short = CONFIG.model_copy(
        update={"watcher": CONFIG.watcher.model_copy(update={"watch_requeued_s": 5.0})}
    )
    watcher = SlurmWatcher(s, short, Collector())
    jobs = list(s.jobs.values())
    watcher.detect(jobs, [], now=0.0)
    requeued = [jobs[0].model_copy(update={"state": JobState.PENDING, "restart_count": 1})]
    watcher.detect(requeued, [], now=1.0)
    assert watcher.requeued_in_view == {"12"}
    watcher.detect(requeued, [], now=7.0)
    assert watcher.requeued_in_view == set()
    watcher.detect([jobs[0]], [], now=8.0)
    watcher.detect(requeued, [], now=9.0)
    assert watcher.requeued_in_view == {"12"}
    watcher.detect([requeued[0].model_copy(update={"state": JobState.RUNNING})], [], now=10.0)
    assert watcher.requeued_in_view == set()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_new_job_held_after_its_first_launch_failed_is_found_by_the_periodic_scan() -> None:
    s = FakeScheduler.with_nodes(4)
    s.jobs["13"] = running("13").model_copy(
        update={"state": JobState.PENDING, "nodes": [], "restart_count": 1, **LAUNCH_FAILED}
    )
    s.jobs["14"] = s.jobs["13"].model_copy(update={"job_id": "14", "comment": ""})
    clock = Clock()
    report = Collector()
    watcher = SlurmWatcher(s, CONFIG, report, clock=clock)
    assert await watcher.poll_once() == []  # never seen running: not in the view
    clock.now += CONFIG.watcher.held_scan_interval_s
    [failed] = await watcher.poll_once()
    assert (failed.job_id, failed.restart_count) == ("13", 0)
    assert watcher.requeued_in_view == {"13"}  # the job not opted in is let go
