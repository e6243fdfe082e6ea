from __future__ import annotations

import sys

import pytest
from pydantic import BaseModel
from support.node_loss import IndexedFakeScheduler
from temporalio.exceptions import ApplicationError

from resurrect.activities.external_program import run_program
from resurrect.activities.steps import drain_nodes, requeue_job
from resurrect.config import ResurrectConfig
from resurrect.contracts import JobInfo, JobState, NodeInfo, RecoveryState, StepResult
from resurrect.errors import PluginError, TransientStepError
from resurrect.sdk import FakeScheduler, StepContext, make_step_input, run_step, step


class Params(BaseModel):
    target: str


calls: list[str] = []


@step("plugin.touch")
async def touch(ctx: StepContext, params: Params) -> StepResult:
    calls.append(params.target)
    return StepResult(detail=f"touched {params.target}")


async def test_mutating_step_is_skipped_in_observe_mode() -> None:
    calls.clear()
    result = await run_step(touch, {"target": "node2"}, observe=True)
    assert calls == [] and result.would_have == ["would run plugin.touch(target='node2')"]
    result = await run_step(touch, {"target": "node2"})
    assert calls == ["node2"] and result.detail == "touched node2"


async def test_invalid_params_are_a_permanent_failure() -> None:
    with pytest.raises(ApplicationError) as err:
        await run_step(touch, {"target": 3, "extra": True})
    assert err.value.non_retryable and "invalid params" in str(err.value)


def test_decorator_rejects_bad_steps() -> None:
    with pytest.raises(PluginError, match="async"):
        step("plugin.sync_one")(lambda ctx, params: None)  # type: ignore[arg-type,return-value]
    for name in ["drain_nodes", "Plugin.bad-name", "plugin.", ".x", "a.b.c"]:
        with pytest.raises(PluginError, match=r"use <namespace>\.<step>"):
            step(name)  # one spelling: the full activity name, as plans call it
    with pytest.raises(PluginError, match="pydantic model"):

        @step("plugin.wrong_params")
        async def wrong(ctx: StepContext, params: int) -> None:
            return None


async def test_transient_error_stays_retryable() -> None:
    @step("plugin.flaky")
    async def flaky(ctx: StepContext, params: None) -> None:
        raise TransientStepError("try later")

    with pytest.raises(TransientStepError):
        await run_step(flaky)


async def test_drain_respects_the_blast_radius_budget() -> None:
    scheduler = FakeScheduler.with_nodes(8, cluster_name="test")
    await scheduler.drain_node("node5", "resurrect: earlier incident")
    config = ResurrectConfig.model_validate({"isolation": {"max_drain_fraction": 0.25}})
    step_input = make_step_input("recovery.drain_nodes", culprits=["node1", "node2", "node3"])
    result = await run_step(drain_nodes, scheduler=scheduler, config=config, step_input=step_input)
    assert result.drained_nodes == ["node1"]  # budget 2 of 8, one already used
    assert sum("blast-radius budget" in note for note in result.notes) == 2
    assert not scheduler.nodes["node2"].drained


async def test_requeue_is_idempotent() -> None:
    scheduler = FakeScheduler.with_nodes(4, cluster_name="test")
    job = JobInfo(
        job_id="42", state=JobState.FAILED, user="alice", nodes=["node1", "node2"], num_nodes=2
    )
    scheduler.jobs["42"] = job
    step_input = make_step_input("recovery.requeue_job", job=job)
    first = await run_step(requeue_job, scheduler=scheduler, step_input=step_input)
    again = await run_step(requeue_job, scheduler=scheduler, step_input=step_input)
    assert first.requeued and again.requeued and "already requeued" in again.detail
    # one requeue (hold -> exclude -> release), none the second time
    assert scheduler.calls == [("requeuehold", "42"), ("exclude", "42"), ("release", "42")]
    assert scheduler.jobs["42"].user == "alice" and "node2" in scheduler.jobs["42"].excluded_nodes


@pytest.mark.parametrize(("code", "ok"), [(0, True), (1, False)])
async def test_external_program_exit_codes(code: int, ok: bool) -> None:
    argv = [
        sys.executable,
        "-c",
        f"import sys; print('job', sys.argv[1]); sys.exit({code})",
        "{job_id}",
    ]
    result = await run_step(run_program, {"argv": argv})
    assert result.ok is ok
    [entry] = result.data.values()
    assert entry["exit_code"] == code and "job 42" in entry["output"]


async def test_external_program_unknown_result_and_timeout_are_transient() -> None:
    with pytest.raises(TransientStepError, match="exit 3"):
        await run_step(
            run_program,
            {"argv": [sys.executable, "-c", "raise SystemExit(3)"]},
        )
    with pytest.raises(TransientStepError, match="timed out"):
        await run_step(
            run_program,
            {"argv": [sys.executable, "-c", "import time; time.sleep(30)"], "timeout_s": 0.5},
        )


async def test_external_program_per_node_and_output_truncation() -> None:
    argv = [sys.executable, "-c", "import sys; print(sys.argv[1] * 5000)", "{node}"]
    step_input = make_step_input(
        "recovery.run_program",
        {"argv": argv, "per_node": True, "output_limit": 100},
        state=RecoveryState(drained_nodes=["node2"]),
    )
    result = await run_step(run_program, step_input=step_input)
    assert list(result.data) == [f"{sys.executable} [node2]"]
    assert "more bytes" in result.data[f"{sys.executable} [node2]"]["output"]


async def test_external_program_refuses_unsafe_values() -> None:
    job = JobInfo(job_id="42", state=JobState.FAILED, nodes=["node1;rm -rf /"])
    step_input = make_step_input(
        "recovery.run_program", {"argv": ["echo", "{job_nodes}"]}, job=job, culprits=[]
    )
    with pytest.raises(ApplicationError, match="unsafe"):
        await run_step(run_program, step_input=step_input)


async def test_step_context_exposes_the_recovery() -> None:
    seen: dict[str, object] = {}

    @step("plugin.look", mutating=False)
    async def look(ctx: StepContext, params: None) -> str:
        seen.update(
            job=ctx.job.job_id,
            fault=ctx.diagnosis.fault_class.value,
            drained=ctx.state.drained_nodes,
            observe=ctx.observe,
            workflow_id=ctx.workflow_id,
            decision=ctx.decision.drain_nodes,
        )
        return "looked"

    step_input = make_step_input("plugin.look", state=RecoveryState(drained_nodes=["node2"]))
    result = await run_step(look, step_input=step_input)
    assert result.detail == "looked"
    assert seen == {
        "job": "42",
        "fault": "gpu.hardware",
        "drained": ["node2"],
        "observe": False,
        "workflow_id": "recover/test/42/0",
        "decision": ["node2"],
    }


async def test_requeue_leaves_a_healthy_rerun_alone() -> None:
    """slurmctld requeued the job itself and it already runs on good nodes: do not kill it."""
    scheduler = FakeScheduler.with_nodes(4, cluster_name="test")
    failed = JobInfo(job_id="42", state=JobState.NODE_FAIL, nodes=["node1", "node2"], num_nodes=2)
    scheduler.jobs["42"] = failed.model_copy(
        update={"state": JobState.RUNNING, "restart_count": 1, "nodes": ["node1", "node3"]}
    )
    step_input = make_step_input("recovery.requeue_job", job=failed)
    result = await run_step(requeue_job, scheduler=scheduler, step_input=step_input)
    assert result.requeued and "already requeued" in result.detail and scheduler.calls == []
    # ...but a rerun that landed on the implicated node is requeued again
    scheduler.jobs["42"] = scheduler.jobs["42"].model_copy(update={"nodes": ["node2", "node3"]})
    result = await run_step(requeue_job, scheduler=scheduler, step_input=step_input)
    assert scheduler.calls == [("requeuehold", "42"), ("exclude", "42"), ("release", "42")]


async def test_requeue_never_reruns_a_completed_job() -> None:
    scheduler = FakeScheduler.with_nodes(4, cluster_name="test")
    failed = JobInfo(job_id="42", state=JobState.NODE_FAIL, nodes=["node1", "node2"], num_nodes=2)
    step_input = make_step_input("recovery.requeue_job", job=failed)
    # slurmctld requeued it and the new attempt already finished
    scheduler.jobs["42"] = failed.model_copy(
        update={"state": JobState.COMPLETED, "restart_count": 1}
    )
    result = await run_step(requeue_job, scheduler=scheduler, step_input=step_input)
    assert result.requeued and scheduler.calls == []
    # the attempt we were told about completed after all
    scheduler.jobs["42"] = failed.model_copy(update={"state": JobState.COMPLETED})
    result = await run_step(requeue_job, scheduler=scheduler, step_input=step_input)
    assert result.stop_recovery and result.outcome == "job_completed" and scheduler.calls == []


async def test_heartbeat_from_a_worker_thread_reaches_the_activity() -> None:
    import asyncio

    from temporalio.testing import ActivityEnvironment

    from resurrect.steps.runtime import StepRuntime, make_activity

    @step("plugin.threaded", mutating=False)
    async def threaded(ctx: StepContext, params: None) -> str:
        await asyncio.to_thread(ctx.heartbeat, "from a thread")
        await asyncio.sleep(0.05)  # let the loop deliver it
        return "ok"

    env = ActivityEnvironment()
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.extend(details)
    runtime = StepRuntime(scheduler=FakeScheduler.with_nodes(1), config=ResurrectConfig())
    result = await env.run(
        make_activity(threaded, runtime, activity_name="plugin.threaded"),
        make_step_input("plugin.threaded"),
    )
    assert result.detail == "ok" and "from a thread" in beats


async def test_drains_read_their_nodes_by_name_and_the_cluster_size_once_a_minute() -> None:
    """A burst of drains on a 10,000-node cluster must not list every node per drain."""
    scheduler = IndexedFakeScheduler(cluster_name="test")
    for index in range(1, 9):
        scheduler.nodes[f"node{index}"] = NodeInfo(name=f"node{index}", state="IDLE")
    listed = 0
    list_nodes = scheduler.list_nodes

    async def counted() -> list[NodeInfo]:
        nonlocal listed
        listed += 1
        return await list_nodes()

    scheduler.list_nodes = counted  # type: ignore[method-assign]
    config = ResurrectConfig.model_validate({"isolation": {"max_drain_fraction": 0.25}})
    for culprit in ("node1", "node2", "node3"):
        step_input = make_step_input("recovery.drain_nodes", culprits=[culprit])
        await run_step(drain_nodes, scheduler=scheduler, config=config, step_input=step_input)
    assert listed == 1  # the cluster's shape; the nodes themselves were read by name
    # the budget still holds: 2 of 8 nodes (a step without Temporal counts drained nodes)
    assert [n for n, info in scheduler.nodes.items() if info.drained] == ["node1", "node2"]
