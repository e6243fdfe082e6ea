"""PyslurmScheduler against a fake pyslurm module, and the backend factory."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from resurrect.contracts import JobState
from resurrect.errors import ConfigError, JobNotFound, SchedulerRefused
from resurrect.scheduler import Scheduler
from resurrect.scheduler.factory import make_scheduler
from resurrect.scheduler.pyslurm_backend import PyslurmScheduler, pyslurm_version
from resurrect.scheduler.slurm_cli import SlurmCli


class FakeRPCError(Exception):
    pass


def fake_pyslurm(version: str = "24.11.0") -> tuple[ModuleType, dict[str, Any]]:
    """A tiny in-memory pyslurm: one 2-node running job, three nodes."""
    state: dict[str, Any] = {
        "nodes": {
            n: SimpleNamespace(name=n, state="IDLE", reason="", partitions=["debug"])
            for n in ("n1", "n2", "n3")
        },
        "jobs": {
            7: SimpleNamespace(
                id=7,
                name="train",
                state="RUNNING",
                state_reason="None",
                user_name="alice",
                user_id=1001,
                partition="debug",
                allocated_nodes="n[1-2]",
                excluded_nodes=None,
                num_nodes=2,
                requeue_count=0,
                is_requeueable=True,
                priority=100,
                comment="",
                standard_output="/o/7.out",
                standard_error=None,
                working_directory="/o",
                exit_code=None,
                start_time=1795981300,
                end_time=None,
            )
        },
        "calls": [],
    }
    mod = ModuleType("pyslurm")
    mod.__version__ = version  # type: ignore[attr-defined]
    mod.RPCError = FakeRPCError  # type: ignore[attr-defined]

    class Node:
        def __init__(self, name: str | None = None, **changes: Any) -> None:
            self.name = name
            self.changes = changes

        def modify(self, changes: Node) -> None:
            node = state["nodes"][self.name]
            state["calls"].append(("node.modify", self.name, changes.changes))
            if changes.changes.get("state") == "DRAIN":
                node.state = "IDLE+DRAIN"
                node.reason = changes.changes["reason"]
            elif changes.changes.get("state") == "RESUME":
                node.state = "IDLE"
                node.reason = ""

    class Job:
        def __init__(self, job_id: int) -> None:
            if job_id not in state["jobs"]:
                raise FakeRPCError("Invalid job id specified")
            self.job = state["jobs"][job_id]

        def requeue(self, hold: bool = False) -> None:
            state["calls"].append(("job.requeue", self.job.id, hold))
            self.job.state, self.job.priority = "PENDING", 0 if hold else 1
            self.job.state_reason = "job_requeued_in_held_state"
            self.job.requeue_count += 1
            self.job.allocated_nodes = None

        def hold(self) -> None:
            state["calls"].append(("job.hold", self.job.id))
            self.job.priority = 0

        def release(self) -> None:
            state["calls"].append(("job.release", self.job.id))
            self.job.priority, self.job.state_reason = 1, "BeginTime"

        def modify(self, desc: Any) -> None:
            state["calls"].append(("job.modify", self.job.id, desc.excluded_nodes))
            self.job.excluded_nodes = ",".join(desc.excluded_nodes)

        def cancel(self) -> None:
            self.job.state = "CANCELLED"

    mod.Node = Node  # type: ignore[attr-defined]
    mod.Job = Job  # type: ignore[attr-defined]
    mod.Nodes = SimpleNamespace(load=lambda: dict(state["nodes"]))  # type: ignore[attr-defined]
    mod.Jobs = SimpleNamespace(load=lambda: dict(state["jobs"]))  # type: ignore[attr-defined]
    mod.JobSubmitDescription = lambda **kw: SimpleNamespace(**kw)  # type: ignore[attr-defined]
    return mod, state


def backend() -> tuple[PyslurmScheduler, dict[str, Any]]:
    mod, state = fake_pyslurm()
    return PyslurmScheduler("c", mod, verify_timeout=1.0, poll_interval=0.01), state


async def test_reads() -> None:
    sched, _ = backend()
    assert isinstance(sched, Scheduler)
    job = await sched.get_job("7")
    assert job.state is JobState.RUNNING and job.nodes == ["n1", "n2"] and job.user == "alice"
    assert job.start_time is not None
    node = await sched.get_node("n1")
    assert node.state == "IDLE" and not node.drained
    with pytest.raises(JobNotFound):
        await sched.get_job("8")


@pytest.mark.parametrize(
    "hostile",
    [
        {"allocated_nodes": "n[1-"},
        {"start_time": float("nan")},
        {"start_time": 10**30},
        {"name": object()},
        {"num_nodes": "²"},
    ],
)
async def test_one_unreadable_job_costs_that_job_alone(hostile: dict[str, Any]) -> None:
    sched, state = backend()
    bad = SimpleNamespace(**{**vars(state["jobs"][7]), "id": 8, **hostile})
    state["jobs"][8] = bad
    assert "7" in {job.job_id for job in await sched.list_jobs()}


async def test_drain_resume_roundtrip_and_operator_guard() -> None:
    sched, state = backend()
    result = await sched.drain_node("n3", "gpu xid")
    assert result.changed and state["nodes"]["n3"].reason == "resurrect: gpu xid"
    assert (await sched.drain_node("n3", "again")).changed is False
    assert (await sched.resume_node("n3")).changed is True
    state["nodes"]["n2"].state, state["nodes"]["n2"].reason = "IDLE+DRAIN", "operator: x"
    with pytest.raises(SchedulerRefused):
        await sched.resume_node("n2")


async def test_requeue_running_job_uses_requeuehold_exclude_release() -> None:
    sched, state = backend()
    result = await sched.requeue_excluding("7", ["n2"])
    assert result.changed
    assert [c[0] for c in state["calls"]] == ["job.requeue", "job.modify", "job.release"]
    assert state["calls"][0] == ("job.requeue", 7, True)
    job = await sched.get_job("7")
    assert job.excluded_nodes == ["n2"] and not job.held and job.restart_count == 1
    again = await sched.requeue_excluding("7", ["n2"])
    assert again.changed is False


async def test_pyslurm_errors_are_mapped() -> None:
    sched, _ = backend()
    with pytest.raises(JobNotFound):
        await sched._act_hold("99")


def test_version_and_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    mod, _ = fake_pyslurm("24.11.3")
    assert pyslurm_version(mod) == (24, 11)
    monkeypatch.setitem(sys.modules, "pyslurm", mod)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    auto = make_scheduler("auto", "c", None, version_probe=lambda: (24, 11))
    assert isinstance(auto, PyslurmScheduler)
    mismatch = make_scheduler("auto", "c", None, version_probe=lambda: (22, 5))
    assert isinstance(mismatch, SlurmCli)
    with pytest.raises(ConfigError, match="does not match"):
        make_scheduler("pyslurm", "c", None, version_probe=lambda: (22, 5))
    # a private SLURM_CONF that pyslurm would not see forces the CLI
    private = make_scheduler("auto", "c", "/x/slurm.conf", version_probe=lambda: (24, 11))
    assert isinstance(private, SlurmCli)
    assert isinstance(make_scheduler("cli", "c", None), SlurmCli)


def test_factory_without_pyslurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # makes `import pyslurm` fail
    assert isinstance(make_scheduler("auto", "c", None, version_probe=lambda: (22, 5)), SlurmCli)
    with pytest.raises(ConfigError, match="missing"):
        make_scheduler("pyslurm", "c", None)
    with pytest.raises(ConfigError):
        make_scheduler("k8s", "c", None)  # type: ignore[arg-type]
