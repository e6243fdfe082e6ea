"""One hostile job beside good ones: the Slurm watcher and the node-health report keep
serving every other job, and the hostile one gets a note, not a crash of the loop."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
from support.reports import Reports
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from resurrect.activities.node_health import NodeHealthActivities
from resurrect.config import ResurrectConfig
from resurrect.contracts import FaultClass, Interruption, JobInfo, JobPolicy, JobState
from resurrect.contracts.node_health import NodeFaultReport
from resurrect.sensors.slurm_watcher import SlurmWatcher
from resurrect.testing import FakeScheduler

CONFIG = ResurrectConfig.model_validate(
    {"cluster": {"name": "c1"}, "watcher": {"poll_interval_s": 0.05}}
)
OPT_IN = json.dumps({"resurrect": {}})
HOSTILE_COMMENTS = [
    '{"resurrect": {"max_restarts": ' + "9" * 5000 + "}}",
    '{"resurrect": ' + "[" * 100000,
    '{"resurrect": {"enabled": false, "max_restart": 0}}',
    '{"resurrect": {"hang_after_s": NaN}}',
    '{"resurrect": {"mode": "act", "mode": "act"}}',
]


def failed_job(job_id: str, comment: str, node: str = "node1") -> JobInfo:
    return JobInfo(
        job_id=job_id, state=JobState.NODE_FAIL, nodes=[node], comment=comment, user_id=1000
    )


async def test_watcher_loop_reports_the_good_job_beside_hostile_comments() -> None:
    s = FakeScheduler.with_nodes(3)
    for number, comment in enumerate(HOSTILE_COMMENTS):
        s.jobs[str(100 + number)] = failed_job(str(100 + number), comment)
    s.jobs["7"] = failed_job("7", OPT_IN, "node2")
    reports = Reports()

    watcher = SlurmWatcher(s, CONFIG, reports)
    stop = asyncio.Event()
    loop = asyncio.create_task(watcher.run(stop))
    for _ in range(100):
        if reports and watcher.polls >= 3:
            break
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(loop, 5)
    assert not loop.exception()
    assert [r.job_id for r in reports] == ["7"]  # once, though polled several times
    for number in range(len(HOSTILE_COMMENTS)):
        assert (
            "malformed resurrect comment, so not opted in"
            in watcher.notes.latest[str(100 + number)]
        )
    # each note logged once, however many polls saw it
    assert watcher.notes.count - watcher.notes.suppressed == len(HOSTILE_COMMENTS)


async def test_a_job_whose_handling_fails_is_noted_and_the_others_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever fails for one job (here: a bug triggered by its data) stays with that job."""
    import resurrect.sensors.slurm_watcher as watcher_module

    real = watcher_module.resolve_job_policy

    def explodes_on_job_13(job: JobInfo, config: ResurrectConfig):  # type: ignore[no-untyped-def]
        if job.job_id == "13":
            raise OverflowError("crafted")
        return real(job, config)

    monkeypatch.setattr(watcher_module, "resolve_job_policy", explodes_on_job_13)
    s = FakeScheduler.with_nodes(2)
    s.jobs["13"] = failed_job("13", OPT_IN)
    s.jobs["14"] = failed_job("14", OPT_IN)
    reported = Reports()

    watcher = SlurmWatcher(s, CONFIG, reported)
    await watcher.poll_once()
    await watcher.poll_once()
    assert [r.job_id for r in reported] == ["14"]
    assert "checking the job failed: OverflowError: crafted" in watcher.notes.latest["13"]
    assert watcher.notes.suppressed == 1  # logged once, not at every poll


class Recorder:
    def __init__(self) -> None:
        self.sent: list[Interruption] = []

    async def __call__(self, client: Client, interruption: Interruption, *, task_queue: str) -> str:
        self.sent.append(interruption)
        return interruption.workflow_id


async def test_node_fault_report_reaches_co_located_good_jobs() -> None:
    jobs = [
        JobInfo(job_id=str(100 + n), state=JobState.RUNNING, nodes=["n3"], comment=c)
        for n, c in enumerate(HOSTILE_COMMENTS)
    ]
    jobs.append(JobInfo(job_id="7", state=JobState.RUNNING, nodes=["n3"], comment=OPT_IN))
    jobs.append(JobInfo(job_id="8", state=JobState.RUNNING, nodes=["n3"], comment=OPT_IN))
    recorder = Recorder()

    def policy(job: JobInfo, config: ResurrectConfig) -> JobPolicy | None:
        if job.job_id == "8":
            raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")
        from resurrect.policy import job_policy

        return job_policy(job, config)

    activities = NodeHealthActivities(
        FakeScheduler(jobs=jobs),
        client=None,  # type: ignore[arg-type]  # only handed to the report function
        config=ResurrectConfig.model_validate({"temporal": {"task_queue": "q1"}}),
        report=recorder,
        policy=policy,
    )
    result = await ActivityEnvironment().run(
        activities.report_node_fault,
        NodeFaultReport(
            cluster="c1",
            node="n3",
            fault_class=FaultClass.NODE_LOST,
            reason="agent silent",
            observed_at=datetime(2026, 11, 29, 20, 0, tzinfo=UTC),
        ),
    )
    assert [i.job_id for i in recorder.sent] == ["7"]
    assert "job 8: policy unreadable, not opted in" in result.skipped
    assert sum("not opted in" in s for s in result.skipped) == len(HOSTILE_COMMENTS) + 1
