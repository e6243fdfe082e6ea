"""SlurmCli against a real local Slurm cluster (deploy/local-slurm, 4 nodes)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from support.slurm import LocalSlurm, start_local_slurm, stop_local_slurm

from resurrect.contracts import JobState
from resurrect.errors import (
    JobNotFound,
    NodeNotFound,
    NodeNotRegistered,
    SchedulerRefused,
    SchedulerUnavailable,
)
from resurrect.scheduler.base import DRAIN_REASON_PREFIX

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions]

SLEEP_JOB = ["bash", "-c", "srun sleep 600 & sleep 600; wait"]


async def wait_running(slurm: LocalSlurm, job_id: str, timeout: float = 60) -> None:
    await asyncio.to_thread(slurm.wait_job_state, job_id, ["RUNNING"], timeout)


async def test_drain_resume_with_prefix_idempotent(slurm: LocalSlurm) -> None:
    sched = slurm.scheduler()
    node = slurm.nodes[3]
    first = await sched.drain_node(node, "gpu.hardware xid 79 inc-1")
    assert first.changed is True
    info = await sched.get_node(node)
    assert info.drained and info.reason.startswith(f"{DRAIN_REASON_PREFIX} gpu.hardware")
    assert "DRAIN" in slurm.node(node)["State"]
    again = await sched.drain_node(node, "another reason")
    assert again.changed is False
    assert (await sched.get_node(node)).reason == info.reason  # not overwritten
    resumed = await sched.resume_node(node)
    assert resumed.changed is True
    assert not (await sched.get_node(node)).drained
    assert (await sched.resume_node(node)).changed is False


async def test_refuses_to_resume_operator_drain(slurm: LocalSlurm) -> None:
    node = slurm.nodes[2]
    slurm.run(
        ["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=operator: bad dimm"]
    )
    sched = slurm.scheduler()
    with pytest.raises(SchedulerRefused, match="not drained by resurrect"):
        await sched.resume_node(node)
    assert (await sched.drain_node(node, "gpu")).changed is False
    info = await sched.get_node(node)
    assert info.drained and info.reason.startswith("operator: bad dimm")


async def test_hostile_reason_is_stored_as_plain_text(slurm: LocalSlurm) -> None:
    sched = slurm.scheduler()
    node = slurm.nodes[1]
    await sched.drain_node(node, "x\nState=RESUME Reason=pwned; touch /tmp/pwned `id`")
    info = await sched.get_node(node)
    assert info.drained
    assert info.reason.startswith("resurrect: x State=RESUME Reason=pwned_ touch /tmp/pwned _id_")
    await sched.resume_node(node)


async def test_unknown_job_and_node(slurm: LocalSlurm) -> None:
    sched = slurm.scheduler()
    with pytest.raises(JobNotFound):
        await sched.get_job("987654")
    with pytest.raises(JobNotFound):
        await sched.requeue_excluding("987654", [slurm.nodes[0]])
    with pytest.raises(JobNotFound):
        await sched.cancel_job("987654")
    with pytest.raises(NodeNotFound):
        await sched.get_node("nosuchnode")
    with pytest.raises(NodeNotFound):
        await sched.drain_node("nosuchnode", "x")


async def test_requeue_running_job_excluding_keeps_id_and_owner(slurm: LocalSlurm) -> None:
    sched = slurm.scheduler()
    job_id = slurm.submit(SLEEP_JOB, nodes=2, comment="resurrect: enabled", name="req-run")
    await wait_running(slurm, job_id)
    before = await sched.get_job(job_id)
    assert before.state is JobState.RUNNING and len(before.nodes) == 2
    bad = before.nodes[0]

    result = await sched.requeue_excluding(job_id, [bad])
    assert result.changed is True
    assert "requeuehold (RUNNING)" in result.detail
    after = await sched.get_job(job_id)
    assert after.job_id == job_id
    assert after.user == "resurrect-demo" and after.user_id == before.user_id
    assert after.comment == "resurrect: enabled"
    assert after.restart_count == before.restart_count + 1
    assert bad in after.excluded_nodes and not after.held

    if after.state is JobState.PENDING:  # idempotent while it waits to start again
        again = await sched.requeue_excluding(job_id, [bad])
        # (unless it started again in between: then it is a genuine second requeue)
        assert again.changed is False or "requeuehold (RUNNING)" in again.detail

    await wait_running(slurm, job_id)
    running = await sched.get_job(job_id)
    assert running.state is JobState.RUNNING
    assert bad not in running.nodes and len(running.nodes) == 2


async def test_requeue_finished_job(slurm: LocalSlurm) -> None:
    sched = slurm.scheduler()
    job_id = slurm.submit(["bash", "-c", "exit 3"], nodes=1, name="req-failed")
    await asyncio.to_thread(slurm.wait_job_state, job_id, ["FAILED"], 60)
    failed = await sched.get_job(job_id)
    assert failed.exit_code == 3
    result = await sched.requeue_excluding(job_id, [failed.nodes[0]])
    assert result.changed and "requeuehold (FAILED)" in result.detail
    again = await sched.get_job(job_id)
    assert again.state in {JobState.PENDING, JobState.RUNNING}
    assert again.restart_count == 1 and failed.nodes[0] in again.excluded_nodes
    await sched.cancel_job(job_id)


async def test_no_requeue_job_is_refused(slurm: LocalSlurm) -> None:
    sched = slurm.scheduler()
    job_id = slurm.submit(SLEEP_JOB, nodes=1, requeue=False, name="noreq")
    await wait_running(slurm, job_id)
    with pytest.raises(SchedulerRefused):
        await sched.requeue_excluding(job_id, [])
    assert (await sched.get_job(job_id)).state is JobState.RUNNING
    cancelled = await sched.cancel_job(job_id)
    assert cancelled.changed is True
    assert (await sched.cancel_job(job_id)).changed is False


async def test_node_kill_auto_requeue_then_hold_exclude_release(slurm: LocalSlurm) -> None:
    sched = slurm.scheduler()
    job_id = slurm.submit(SLEEP_JOB, nodes=2, name="lost")
    await wait_running(slurm, job_id)
    job = await sched.get_job(job_id)
    victim = job.nodes[1]

    t0 = time.monotonic()
    slurm.kill_node(victim)
    down = await asyncio.to_thread(slurm.wait_node_state, victim, ["DOWN"], 60, 0.2)
    detect = time.monotonic() - t0
    print(f"kill-node -> DOWN in {detect:.1f}s: {down['State']} reason={down.get('Reason')}")
    assert "NOT_RESPONDING" in down["State"]
    assert (await sched.get_node(victim)).unavailable

    # slurmctld requeues a --requeue job itself after NODE_FAIL
    def requeued() -> dict[str, str]:
        rec: dict[str, str] = slurm._wait(
            lambda: slurm.job(job_id),
            lambda r: r.get("Restarts") == "1" and r.get("JobState") in {"PENDING", "RUNNING"},
            60,
            0.2,
            "auto requeue",
        )
        return rec

    rec = await asyncio.to_thread(requeued)
    seen = time.monotonic() - t0
    print(f"auto requeue seen {seen:.1f}s after kill: {rec['JobState']} {rec.get('Reason')}")
    result = await sched.requeue_excluding(job_id, [victim])
    assert result.changed is True
    assert result.detail.startswith(("hold", "requeuehold"))
    await wait_running(slurm, job_id)
    final = await sched.get_job(job_id)
    assert final.job_id == job_id and final.user == "resurrect-demo"
    assert victim not in final.nodes and victim in final.excluded_nodes
    assert final.restart_count >= 1


async def test_kill_node_kills_whole_step_tree(slurm: LocalSlurm) -> None:
    marker = f"resurrect-tree-{int(time.time() * 1000)}"
    # grandchild: bash -> bash -> sleep, detached from the step's direct children
    script = f"srun bash -c 'bash -c \"exec -a {marker} sleep 600\" & wait'\n"
    job_id = slurm.submit(script, nodes=1, name="tree")
    await wait_running(slurm, job_id)
    node = slurm.job(job_id)["NodeList"]

    def marker_pids() -> list[str]:
        out: str = slurm.run(["pgrep", "-f", marker], check=False)
        return out.split()

    deadline = time.monotonic() + 20
    while not marker_pids() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert marker_pids(), "grandchild never started"
    slurm.kill_node(node)
    deadline = time.monotonic() + 10  # the kernel reaps the killed tree
    while marker_pids() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert marker_pids() == []


async def test_controller_down_is_unavailable_then_recovers(slurm: LocalSlurm) -> None:
    sched = slurm.scheduler(command_timeout=30.0)
    assert len(await sched.list_nodes()) == len(slurm.nodes)
    slurm.stop_controller()
    try:
        t0 = time.monotonic()
        with pytest.raises(SchedulerUnavailable) as info:
            await sched.list_jobs()
        print(f"SchedulerUnavailable after {time.monotonic() - t0:.1f}s: {info.value}")
        with pytest.raises(SchedulerUnavailable):
            await sched.drain_node(slurm.nodes[0], "x")
    finally:
        slurm.start_controller()
    assert len(await sched.list_nodes()) == len(slurm.nodes)


async def test_a_drained_node_is_resumed_only_once_it_registered_after_a_controller_restart(
    slurm: LocalSlurm,
) -> None:
    """After slurmctld restarts, a node is UNKNOWN until its slurmd registers again (here it
    is frozen, so it cannot); Slurm 22.05 would clear the drain of such a node on a resume
    and answer "Invalid node state specified". resurrect leaves it drained until then."""
    sched = slurm.scheduler()
    node = slurm.nodes[1]
    assert (await sched.drain_node(node, "node.lost test")).changed
    slurm.freeze_node(node)
    try:
        slurm.stop_controller()
        slurm.start_controller()
        info = await sched.get_node(node)
        assert (info.state, info.drained) == ("UNKNOWN", True), info.state_text
        with pytest.raises(NodeNotRegistered):
            await sched.resume_node(node)
        assert (await sched.get_node(node)).drained
    finally:
        slurm.thaw_node(node)
    await asyncio.to_thread(slurm.wait_node_state, node, ["IDLE"], 60, 0.2)
    resumed = await sched.resume_node(node)
    assert resumed.changed and not (await sched.get_node(node)).drained


async def test_frozen_node_goes_down_and_comes_back(slurm: LocalSlurm) -> None:
    node = slurm.nodes[0]
    t0 = time.monotonic()
    slurm.freeze_node(node)
    try:
        rec = await asyncio.to_thread(slurm.wait_node_state, node, ["DOWN"], 60, 0.2)
        print(f"freeze-node -> {rec['State']} in {time.monotonic() - t0:.1f}s")
        assert "NOT_RESPONDING" in rec["State"]
    finally:
        slurm.thaw_node(node)
    await asyncio.to_thread(slurm.wait_node_state, node, ["IDLE"], 60, 0.2)
    assert not (await slurm.scheduler().get_node(node)).unavailable


def test_second_cluster_runs_beside_the_first(slurm: LocalSlurm) -> None:
    other = start_local_slurm(nodes=1, node_prefix="side")
    try:
        assert other.slurm_conf != slurm.slurm_conf and other.ctld_port != slurm.ctld_port
        job_id = other.submit(["true"], nodes=1, name="side")
        other.wait_job_state(job_id, ["COMPLETED"], timeout=30)
        assert other.job(job_id)["UserId"].startswith("resurrect-demo(")
        assert "side1" not in slurm.run(["sinfo", "-h", "-N", "-o", "%N"])
    finally:
        stop_local_slurm(other)
    assert slurm.node(slurm.nodes[0])["State"] == "IDLE"


def test_jobcomp_script_hook() -> None:
    hook_dir = Path(tempfile.mkdtemp(prefix="resurrect-hook-", dir="/tmp"))
    hook_dir.chmod(0o755)
    log = hook_dir / "jobcomp.log"
    hook = hook_dir / "jobcomp.sh"
    hook.write_text(f'#!/bin/bash\necho "$JOBID $JOBSTATE $EXITCODE $NODES" >> {log}\n')
    hook.chmod(0o755)
    cluster = start_local_slurm(nodes=1, node_prefix="jc", jobcomp_script=str(hook))
    try:
        job_id = cluster.submit(["bash", "-c", "exit 4"], nodes=1, name="jc")
        cluster.wait_job_state(job_id, ["FAILED"], timeout=30)
        deadline = time.monotonic() + 10
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert log.read_text().split() == [job_id, "FAILED", "4:0", "jc1"]
    finally:
        stop_local_slurm(cluster)
        shutil.rmtree(hook_dir, ignore_errors=True)


async def test_requeue_right_after_node_kill_before_slurm_notices(slurm: LocalSlurm) -> None:
    """The realistic race: resurrect acts before slurmctld declares the node DOWN. The job
    shows COMPLETING (held) until then; the exclusion is set at once and the job starts
    again elsewhere once the node is DOWN."""
    sched = slurm.scheduler()
    job_id = slurm.submit(SLEEP_JOB, nodes=2, name="race")
    await wait_running(slurm, job_id)
    victim = (await sched.get_job(job_id)).nodes[0]
    slurm.kill_node(victim)
    t0 = time.monotonic()
    result = await sched.requeue_excluding(job_id, [victim])
    took = time.monotonic() - t0
    assert result.changed and "requeuehold (RUNNING)" in result.detail
    print(f"requeue right after kill took {took:.1f}s: {result.detail}")
    after = await sched.get_job(job_id)
    if after.state is not JobState.COMPLETING:  # settled: the old allocation is gone
        assert victim not in after.nodes or after.state is JobState.PENDING
    await wait_running(slurm, job_id)
    final = await sched.get_job(job_id)
    assert victim not in final.nodes and final.restart_count == 1 and not final.held


async def test_a_non_ascii_pad_width_costs_no_other_job(slurm: LocalSlurm) -> None:
    """A job whose output pattern has a width str.isdigit() accepts (a superscript two)
    beside another job: the watcher's view and the full list read both, on every backend,
    and the path is the file slurmstepd writes (issue 33, item 1)."""
    sched = slurm.scheduler()
    hostile = slurm.submit(
        SLEEP_JOB, nodes=1, name="width", output=str(slurm.out_dir / "w-%\u00b2j.out")
    )
    other = slurm.submit(SLEEP_JOB, nodes=1, name="other")
    await wait_running(slurm, hostile)
    await wait_running(slurm, other)
    for jobs in (await sched.list_active_jobs(), await sched.list_jobs()):
        listed = {job.job_id: job for job in jobs}
        assert {hostile, other} <= set(listed)
        assert "\u00b2" in str(listed[hostile].stdout_path)  # no width: the code kept
    path = Path(str(listed[hostile].stdout_path))
    deadline = time.monotonic() + 30
    while not path.is_file():  # slurmstepd opens it as the batch step starts
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.2)


async def test_a_job_requeued_while_its_attempt_is_torn_down_names_the_attempt_on_its_nodes(
    slurm: LocalSlurm,
) -> None:
    """A requeue whose teardown a silent node holds up: Slurm shows the job COMPLETING with
    ``Restarts`` already counting the requeue and no end time, so the processes still on its
    nodes are the attempt before."""
    sched = slurm.scheduler()
    job_id = slurm.submit(SLEEP_JOB, nodes=2, name="req-teardown")
    await wait_running(slurm, job_id)
    node = (await sched.get_job(job_id)).nodes[1]
    slurm.freeze_node(node)
    try:
        slurm.run(["scontrol", "requeue", job_id])
        tearing_down = await sched.get_job(job_id)
    finally:
        slurm.thaw_node(node)
    assert (tearing_down.state, tearing_down.restart_count) == (JobState.COMPLETING, 1)
    assert tearing_down.requeued_while_completing and tearing_down.attempt_on_nodes == 0
    await sched.cancel_job(job_id)
