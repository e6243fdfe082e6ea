"""A rolling upgrade 0.2.0 -> 0.2.1 with recoveries in flight, and a rollback, against the
real dev server and real worker processes of both releases (docs/upgrading.md).

The 0.2.0 worker is the release's own code (commit e74f95a, docs/versioning.md) installed in
a venv of its own (support/release_venv.py); the 0.2.1 worker is this tree. Both run
``resurrect worker`` on one task queue, against one scheduler (a JSON file:
support/file_scheduler.py). The dev server's long poll is 3 s, so a stopped worker is told
from a live one in seconds (docs/upgrading.md says what to expect with the default minute).

In flight when 0.2.0 stops: a recovery awaiting a second source, one awaiting approval, one
in the back-off between its drain and its requeue, and one whose second-source wait
continued as new. 0.2.1 finishes each with the outcome 0.2.0 would have reached, and no
history holds a failed workflow task. The soak's sequence runs on both: a slurmctld restart
(the job's nodes not responding for one read) while a recovery waits for a second source
drains a node under 0.2.0 and nothing under 0.2.1. A rollback to 0.2.0 refuses a recovery
that 0.2.1 started (its workflow task fails; nothing is changed) until 0.2.1 is back.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from support.builders import interruption, job
from support.file_scheduler import BACKEND, STATE_ENV, FileScheduler, install_backend
from support.release_venv import release_python
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer

from resurrect import __version__
from resurrect.config import load_config
from resurrect.contracts import (
    Evidence,
    FaultClass,
    JobInfo,
    JobState,
    NodeInfo,
    RecoveryOutcome,
    SignalKind,
)
from resurrect.contracts.workflow_names import PHASE_QUERY
from resurrect.operator.cli import decide_approval
from resurrect.sensors.report import report_interruption
from resurrect.temporal.client import connect
from resurrect.temporal.server import EmbeddedTemporal, free_port
from resurrect.workflows.recovery import RecoveryWorkflow

pytestmark = [pytest.mark.temporal, pytest.mark.long_running]

RELEASE_0_2_0 = "e74f95a"  # docs/versioning.md
REPO = Path(__file__).resolve().parents[2]
HISTORIES = REPO / "tests" / "fixtures" / "histories" / "RecoveryWorkflow"
PATCHED_SUFFIX = "-nr-read-twice"  # the histories of the not-responding-read-twice patch
NEW_BUNDLE_FIELDS = frozenset({"not_responding_grace_s", "lasting_unavailable"})  # 0.2.1
REPLAY_SCRIPT = REPO / "tests" / "fixtures" / "upgrade" / "replay_stored.py"
CLUSTER = "upgrade"
# No call of the test waits for the server longer than this.
RPC_TIMEOUT = timedelta(seconds=30)
QUEUE = "resurrect-upgrade"
LONG_POLL = "3s"
OTHER_RELEASE_WINDOW_S = 8.0
# the plan that makes a requeue wait 12 s between attempts (a back-off to upgrade in)
SLOW_REQUEUE_PLAN = {
    "plans": [
        {
            "name": "restart-from-checkpoint",
            "when": {"actions": ["restart"]},
            "steps": [
                {"activity": "recovery.verify_checkpoint", "timeout_s": 60},
                {
                    "activity": "recovery.requeue_job",
                    "timeout_s": 30,
                    "retry": {"initial_interval_s": 12, "backoff": 1.0},
                },
                {"activity": "recovery.wait_running", "timeout_s": 60, "on_failure": "continue"},
            ],
        }
    ]
}


@dataclass
class Release:
    version: str
    python: Path
    pythonpath: list[str]
    config: Path


class Cluster:
    """The dev server, the scheduler file, and the worker processes started on them."""

    def __init__(self, tmp: Path, server: EmbeddedTemporal, client: Client) -> None:
        self.tmp, self.server, self.client = tmp, server, client
        self.scheduler = FileScheduler(tmp / "slurm.json", CLUSTER)
        self.workers: list[subprocess.Popen[bytes]] = []

    def release(self, version: str, python: Path, pythonpath: list[str], **extra: Any) -> Release:
        """A release's worker configuration (each release reads only settings it knows)."""
        plans = self.tmp / "plans.yaml"
        plans.write_text(yaml.safe_dump(SLOW_REQUEUE_PLAN))
        temporal = {
            "embedded": False,
            "address": self.server.address,
            "task_queue": QUEUE,
            "state_dir": str(self.tmp / f"state-{version}"),
            **extra,
        }
        config = {
            "mode": "act",
            "cluster": {"name": CLUSTER, "scheduler": BACKEND},
            "temporal": temporal,
            "isolation": {"max_drain_nodes": 20, "max_drain_fraction": 1.0, "min_drain_budget": 0},
            "approvals": {"drain_nodes_over": 1, "timeout_s": 600},
            "recovery": {"wait_running_timeout_s": 20, "activity_timeout_s": 10},
            "plans": {"paths": [str(plans)]},
            "repair": {"enabled": False},
            "lemons": {"enabled": False},
        }
        path = self.tmp / f"resurrect-{version}.yaml"
        path.write_text(yaml.safe_dump(config))
        return Release(version, python, pythonpath, path)

    def start_worker(self, release: Release) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"worker-{release.version}-{len(self.workers)}.log").open("wb")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(release.pythonpath),
            STATE_ENV: str(self.scheduler.path),
        }
        process = subprocess.Popen(
            [str(release.python), "-m", "resurrect.cli", "-v", "worker", "-c", str(release.config)],
            env=env,
            cwd=self.tmp,  # not the repository: ``-m`` puts the working directory first
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.workers.append(process)
        return process

    def stop_worker(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)

    def stop_all(self) -> None:
        for process in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.stop_worker(process)
            if process.poll() is None:
                process.kill()

    @contextlib.contextmanager
    def slurm(self) -> Iterator[FileScheduler]:
        with self.scheduler.state() as state:
            yield state

    def set_job(self, job_id: str, **update: Any) -> None:
        with self.slurm() as s:
            s.jobs[job_id] = s.jobs[job_id].model_copy(update=update)

    def set_nodes(self, names: list[str], **update: Any) -> None:
        with self.slurm() as s:
            for name in names:
                s.nodes[name] = s.nodes[name].model_copy(update=update)

    def reads(self, job_id: str) -> int:
        with self.slurm() as s:
            return s.reads.get(job_id, 0)

    def calls(self, target: str) -> list[str]:
        """What was done to job or node ``target``, in order (``drain``, ``requeuehold``, ...)."""
        with self.slurm() as s:
            return [action for action, on in s.calls if on == target]

    async def report(self, info: JobInfo, **extra: Any) -> WorkflowHandle[Any, RecoveryOutcome]:
        workflow_id = await report_interruption(
            self.client, interruption(CLUSTER, info, **extra), task_queue=QUEUE
        )
        return self.client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)

    async def silence(self, job_id: str, node: str) -> WorkflowHandle[Any, RecoveryOutcome]:
        """node's agent fell silent while job ``job_id`` runs there (the node agent's report)."""
        with self.slurm() as s:
            info = s.jobs[job_id]
        return await self.report(info, **silence_report(node))

    async def not_responding_for_one_read(
        self, handle: WorkflowHandle[Any, Any], job_id: str, nodes: list[str]
    ) -> int:
        """A slurmctld restart while ``handle`` waits for a second source: ``nodes`` not
        responding (not DOWN) for the wait's next read of job ``job_id`` only; that read's
        count."""
        await until(lambda: in_phase(handle, "awaiting_second_source"), f"{handle.id} waiting")
        before = self.reads(job_id)
        self.set_nodes(nodes, flags=["NOT_RESPONDING"])
        seen = await self.next_read(job_id, before)
        self.set_nodes(nodes, flags=[])
        return seen

    async def not_responding_until_it_acts(
        self, handle: WorkflowHandle[Any, Any], nodes: list[str]
    ) -> None:
        """A slurmctld restart that a release taking one read for Slurm's word acts on:
        ``nodes`` not responding until ``handle`` stops waiting for a second source. (Cleared
        at the job's next read, the flags could be gone before the same evidence read lists
        the nodes, on busy cores: the wait would then go on for good.)"""
        await until(lambda: in_phase(handle, "awaiting_second_source"), f"{handle.id} waiting")
        self.set_nodes(nodes, flags=["NOT_RESPONDING"])
        try:
            await until(
                lambda: _not_in_phase(handle, "awaiting_second_source"), f"{handle.id} acting"
            )
        finally:
            self.set_nodes(nodes, flags=[])

    async def next_read(self, job_id: str, after: int, timeout: float = 40) -> int:
        """Wait until job ``job_id`` was read more than ``after`` times; the count."""
        deadline = time.monotonic() + timeout
        while (count := self.reads(job_id)) <= after:
            assert time.monotonic() < deadline, f"job {job_id} not read again"
            await asyncio.sleep(0.05)
        return count


def silence_report(node: str, at: datetime | None = None) -> dict[str, Any]:
    return {
        "source": "node_agent",
        "reason": f"node agent on {node} silent",
        "observed_at": at or datetime.now(UTC),
        "fault_hint": FaultClass.NODE_LOST,
        "suspect_nodes": [node],
        "job_state": JobState.RUNNING,
        "evidence": [
            Evidence(
                kind=SignalKind.HEARTBEAT,
                text=f"node agent on {node} silent for 6.0s (threshold 6.0s)",
                role="root",
                rule="node_agent.heartbeat_silence",
                fault_class=FaultClass.NODE_LOST,
                host=node,
                source="node_agent",
            )
        ],
    }


async def until(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    """``check()``'s first true answer within ``timeout`` seconds, each call bounded by what
    is left (a query the server never answers must not hold the test forever)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            found = await asyncio.wait_for(check(), max(1.0, deadline - time.monotonic()))
            if found:
                return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def in_phase(handle: WorkflowHandle[Any, Any], phase: str) -> bool:
    return bool(await handle.query(PHASE_QUERY, rpc_timeout=RPC_TIMEOUT) == phase)


async def _not_in_phase(handle: WorkflowHandle[Any, Any], phase: str) -> bool:
    """Whether ``handle`` has left ``phase`` (or ended: a closed run answers no query)."""
    try:
        return not await in_phase(handle, phase)
    except (WorkflowQueryFailedError, RPCError):
        return True


# The server refuses a task that closes the run (completes it, continues it as new) while a
# signal arrived during the task, and the SDK runs the task again with the signal: the
# ordinary race of a signal and a run's end, not a failure of the workflow's code.
SIGNAL_RACE = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND


async def failed_tasks(client: Client, workflow_id: str, run_id: str | None = None) -> list[str]:
    """The causes and messages of the workflow tasks that failed in one run's history (a
    signal racing the run's end aside)."""
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    return [
        f"{WorkflowTaskFailedCause.Name(e.workflow_task_failed_event_attributes.cause)}:"
        f" {e.workflow_task_failed_event_attributes.failure.message}"
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        and e.workflow_task_failed_event_attributes.cause != SIGNAL_RACE
    ]


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    server = EmbeddedTemporal(
        state_dir=tmp_path / "temporal",
        port=free_port(),
        ui_port=free_port(),
        dynamic_config=(f'matching.longPollExpirationInterval="{LONG_POLL}"',),
    )
    server.start()
    try:
        from resurrect.config import TemporalSettings

        client = await connect(TemporalSettings(), address=server.address, attempts=10)
        made = Cluster(tmp_path, server, client)
        nodes = [NodeInfo(name=f"node{i}", state="IDLE") for i in range(1, 21)]
        with made.slurm() as s:
            s.nodes = {n.name: n for n in nodes}
        try:
            yield made
        finally:
            made.stop_all()
    finally:
        server.stop()


def running(job_id: str, *nodes: str) -> JobInfo:
    return job(job_id, state=JobState.RUNNING, nodes=nodes)


async def test_recoveries_in_flight_survive_the_upgrade_and_a_rollback_refuses_new_ones(
    cluster: Cluster,
) -> None:
    plugin = str(install_backend(cluster.tmp / "backend"))
    old = cluster.release("0.2.0", release_python(RELEASE_0_2_0, "0.2.0"), [plugin])
    new = cluster.release(
        __version__,
        Path(sys.executable),
        [str(REPO), plugin],
        other_release_window_s=OTHER_RELEASE_WINDOW_S,
    )
    with cluster.slurm() as s:
        for info in (
            running("201", "node1", "node2"),  # awaiting a second source
            job("202", nodes=("node3", "node4")),  # both down: 2 drains wait for approval
            job("203", nodes=("node5", "node6")),  # node5 down: drained, then the requeue backs off
            running("204", "node7", "node8"),  # awaiting a second source, continued as new
            running("205", "node9", "node10"),  # the soak's sequence under 0.2.0
            running("206", "node11", "node12"),  # the soak's sequence under 0.2.1
            running("207", "node13", "node14"),  # started by 0.2.1, then rolled back
        ):
            s.jobs[info.job_id] = info
        for name in ("node3", "node4", "node5"):
            s.nodes[name] = s.nodes[name].model_copy(
                update={"state": "DOWN", "flags": ["NOT_RESPONDING"]}
            )
        s.unreachable_requeue = ["203"]

    # ---- 0.2.0 serves the queue; recoveries start and stay in flight
    worker_0_2_0 = cluster.start_worker(old)
    r1 = await cluster.silence("201", "node2")
    r2 = await cluster.report(job("202", nodes=("node3", "node4")))
    r3 = await cluster.report(job("203", nodes=("node5", "node6")))
    r4 = await cluster.silence("204", "node8")
    r5 = await cluster.silence("205", "node10")
    await until(lambda: in_phase(r1, "awaiting_second_source"), "r1 waiting", 90)
    # 0.2.1 refuses to start beside a live 0.2.0 worker (it exits; checked below)
    beside = cluster.start_worker(new)
    # the soak's sequence under 0.2.0 (r5), while r4's wait is driven to continue as new
    _, r4_runs = await asyncio.gather(
        cluster.not_responding_until_it_acts(r5, ["node9", "node10"]),
        continued_as_new(r4, running("204", "node7", "node8"), "node8"),
    )
    await until(lambda: in_phase(r2, "awaiting_approval"), "r2 awaiting approval")
    await until(lambda: _backing_off(r3, "recovery.requeue_job"), "r3 in its requeue back-off")
    assert await in_phase(r1, "awaiting_second_source")
    assert await in_phase(r4, "awaiting_second_source")
    before_patch = await r5.result()
    assert await asyncio.to_thread(beside.wait, 60) != 0
    refusal = (cluster.tmp / "worker-0.2.1-1.log").read_text()
    assert "does not start beside it" in refusal and "docs/upgrading.md" in refusal, refusal

    # ---- the upgrade: stop 0.2.0, start 0.2.1
    cluster.stop_worker(worker_0_2_0)
    worker_0_2_1 = cluster.start_worker(new)
    r7 = await cluster.silence("207", "node14")
    r6 = await cluster.silence("206", "node12")
    cluster.set_job("201", state=JobState.FAILED)  # the second source r1 waited for
    cluster.set_job("204", state=JobState.FAILED)
    with cluster.slurm() as s:
        s.unreachable_requeue = []
    # the soak's sequence under 0.2.1 (r6): the read after the blip finds the nodes back,
    # and the job completes
    blip = asyncio.create_task(cluster.not_responding_for_one_read(r6, "206", ["node11", "node12"]))
    approver = load_config(new.config)
    await until(
        lambda: decide_approval(approver, r2.id, approved=True, reason="rolling upgrade test"),
        "r2 approved",
    )
    await cluster.next_read("206", await blip)
    cluster.set_job("206", state=JobState.COMPLETED)
    outcomes = {
        name: await handle.result()
        for name, handle in (("r1", r1), ("r2", r2), ("r3", r3), ("r4", r4), ("r6", r6))
    }
    after_patch = outcomes["r6"]

    assert (before_patch.outcome, before_patch.drained_nodes) == ("recovered", ["node10"])
    assert (after_patch.outcome, after_patch.drained_nodes) == ("job_completed", [])
    assert after_patch.requeued is False and after_patch.excluded_nodes == []
    assert (outcomes["r1"].outcome, outcomes["r1"].drained_nodes) == ("recovered", [])
    assert "node2" in outcomes["r1"].excluded_nodes
    assert (outcomes["r2"].outcome, sorted(outcomes["r2"].drained_nodes)) == (
        "recovered",
        ["node3", "node4"],
    )
    assert (outcomes["r3"].outcome, outcomes["r3"].drained_nodes) == ("recovered", ["node5"])
    assert (outcomes["r4"].outcome, outcomes["r4"].drained_nodes) == ("recovered", [])
    for handle in (r1, r2, r3, r5, r6):
        assert await failed_tasks(cluster.client, handle.id) == [], handle.id
    for run_id in r4_runs:
        assert await failed_tasks(cluster.client, r4.id, run_id) == []
    replayer = Replayer(workflows=[RecoveryWorkflow], data_converter=cluster.client.data_converter)
    for handle in (r1, r2, r3, r4, r5, r6):
        await replayer.replay_workflow(await handle.fetch_history())

    # ---- rollback: 0.2.0 refuses the recovery 0.2.1 started under the patch
    await until(lambda: in_phase(r7, "awaiting_second_source"), "r7 waiting")
    cluster.stop_worker(worker_0_2_1)
    worker_0_2_0 = cluster.start_worker(old)
    refused = await until(lambda: failed_tasks(cluster.client, r7.id), "r7 refused by 0.2.0", 60)
    assert (await r7.describe()).status is WorkflowExecutionStatus.RUNNING
    assert cluster.calls("207") == cluster.calls("node14") == []  # nothing was changed
    cluster.stop_worker(worker_0_2_0)
    cluster.start_worker(new)  # rolled forward again: 0.2.1 takes it up where it waited
    cluster.set_job("207", state=JobState.COMPLETED)
    rolled_forward = await r7.result()
    assert (rolled_forward.outcome, rolled_forward.drained_nodes) == ("job_completed", [])
    print(
        json.dumps(
            {"rollback refusal": refused[0], "after rolling forward": rolled_forward.outcome}
        )
    )


async def continued_as_new(
    handle: WorkflowHandle[Any, Any], silent: JobInfo, node: str
) -> tuple[str, str]:
    """Drive the recovery of ``silent``, waiting for a second source since ``node``'s agent
    fell silent, until its wait continues as new: each
    report wakes the wait for one more read (the query returns once the workflow task that
    took it is done), and after 500 reads (0.2.0's SECOND_SOURCE_CHECKS_PER_RUN) it goes
    on in a new run. (first run id, second run id)."""
    await until(lambda: in_phase(handle, "awaiting_second_source"), f"{handle.id} waiting")
    first_run = (await handle.describe()).run_id
    assert first_run is not None
    for sent in range(600):
        report = interruption(CLUSTER, silent, **silence_report(node))
        await handle.signal("report", report, rpc_timeout=RPC_TIMEOUT)
        await caught_up(handle)
        if sent >= 480 and sent % 10 == 0 and await _continued(handle, first_run):
            break
    second_run = await until(lambda: _continued(handle, first_run), "continued as new", 30)
    return first_run, second_run


async def caught_up(handle: WorkflowHandle[Any, Any], attempts: int = 5) -> None:
    """Return once the worker has answered a query on ``handle``: every signal sent before
    has been taken by a finished workflow task. A query the worker cannot answer in time
    (on 2 busy cores a workflow task over a long history can take seconds) is asked again."""
    for attempt in range(attempts):
        try:
            await handle.query(PHASE_QUERY, rpc_timeout=RPC_TIMEOUT)
            return
        except RPCError as error:
            if error.status not in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
                raise
            if attempt == attempts - 1:
                raise


async def _continued(handle: WorkflowHandle[Any, Any], first_run: str) -> str | None:
    run_id = (await handle.describe()).run_id
    return run_id if run_id != first_run else None


async def _backing_off(handle: WorkflowHandle[Any, Any], activity: str) -> bool:
    pending = (await handle.describe()).raw_description.pending_activities
    return any(p.activity_type.name == activity and p.attempt >= 2 for p in pending)


def test_0_2_0_refuses_every_stored_history_of_0_2_1(tmp_path: Path) -> None:
    """A rollback never replays a recovery that 0.2.1 started as if 0.2.0 had: 0.2.0's code
    refuses each stored history of the patched shape, and still replays its own. Two
    things refuse: its evidence has fields 0.2.0 does not know (the workflow task fails
    decoding it), and, were they gone, its patch marker has no command in 0.2.0 (a
    non-determinism error naming the patch)."""
    stored = sorted(HISTORIES.glob("*.json"))
    patched = [p for p in stored if p.stem.endswith(PATCHED_SUFFIX)]
    assert len(patched) >= 10
    failures = _replayed_by_0_2_0(stored)
    assert set(failures) == {p.stem for p in stored}
    for path in stored:
        if path in patched:
            assert failures[path.stem] is not None, f"0.2.0 replayed {path.stem} silently"
        else:
            assert failures[path.stem] is None, failures[path.stem]
    without_new_fields = [_without_fields(p, tmp_path, NEW_BUNDLE_FIELDS) for p in patched]
    for name, failure in _replayed_by_0_2_0(without_new_fields).items():
        assert failure is not None and "NondeterminismError" in failure, (name, failure)
        assert "patch marker encountered for change not-responding-read-twice" in failure


def _replayed_by_0_2_0(paths: list[Path]) -> dict[str, str | None]:
    """History name -> how 0.2.0's code failed to replay it (None: it replayed)."""
    answer = subprocess.run(
        [str(release_python(RELEASE_0_2_0, "0.2.0")), str(REPLAY_SCRIPT), *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPLAY_SCRIPT.parent,
        env={**os.environ, "PYTHONPATH": ""},
    )
    return {
        line["history"]: line["failure"]
        for line in map(json.loads, _lines_of(answer.stdout, '{"history"'))
    }


def _without_fields(path: Path, directory: Path, fields: frozenset[str]) -> Path:
    """A copy of a stored history whose payloads lack ``fields`` (at any depth)."""

    def drop(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: drop(v) for k, v in value.items() if k not in fields}
        if isinstance(value, list):
            return [drop(v) for v in value]
        return value

    def payloads(value: Any) -> Any:
        if isinstance(value, dict):
            if "metadata" in value and isinstance(value.get("data"), str):
                decoded = json.loads(base64.b64decode(value["data"]))
                data = base64.b64encode(json.dumps(drop(decoded)).encode()).decode()
                return {**value, "data": data}
            return {k: payloads(v) for k, v in value.items()}
        if isinstance(value, list):
            return [payloads(v) for v in value]
        return value

    copy = directory / path.name
    copy.write_text(json.dumps(payloads(json.loads(path.read_text()))))
    return copy


def _lines_of(output: str, start: str) -> list[str]:
    """The lines of ``output`` that begin with ``start`` (the SDK logs to it too)."""
    return [line for line in output.splitlines() if line.startswith(start)]
