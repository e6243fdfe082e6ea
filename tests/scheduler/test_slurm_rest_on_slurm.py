"""The slurmrestd backend against a real local Slurm cluster with slurmrestd (auth/jwt).

Runs on the Slurm that ``RESURRECT_SLURM_VERSION`` names (24.11 or 26.05; skipped on 22.05,
whose REST API predates the data parsers the backend reads). The contract tests the CLI
backend passes (test_slurm_cluster.py) run here unchanged against the REST backend: this
module's ``slurm`` fixture gives them a cluster whose ``scheduler()`` is the REST backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scheduler.test_slurm_cluster import (  # the CLI backend's contract, run again here
    SLEEP_JOB,
    test_a_non_ascii_pad_width_costs_no_other_job,
    test_controller_down_is_unavailable_then_recovers,
    test_drain_resume_with_prefix_idempotent,
    test_hostile_reason_is_stored_as_plain_text,
    test_no_requeue_job_is_refused,
    test_node_kill_auto_requeue_then_hold_exclude_release,
    test_refuses_to_resume_operator_drain,
    test_requeue_finished_job,
    test_requeue_right_after_node_kill_before_slurm_notices,
    test_requeue_running_job_excluding_keeps_id_and_owner,
    test_unknown_job_and_node,
    wait_running,
)
from support.slurm import LocalSlurm, local_slurm_fixture, slurm_release

from resurrect.contracts import JobInfo, NodeInfo
from resurrect.errors import SchedulerUnavailable
from resurrect.scheduler.base import SchedulerBase
from resurrect.scheduler.hold_marker import has_marker
from resurrect.scheduler.slurm_rest import SlurmRest

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions]

__all__ = [
    "test_a_non_ascii_pad_width_costs_no_other_job",
    "test_controller_down_is_unavailable_then_recovers",
    "test_drain_resume_with_prefix_idempotent",
    "test_hostile_reason_is_stored_as_plain_text",
    "test_no_requeue_job_is_refused",
    "test_node_kill_auto_requeue_then_hold_exclude_release",
    "test_refuses_to_resume_operator_drain",
    "test_requeue_finished_job",
    "test_requeue_right_after_node_kill_before_slurm_notices",
    "test_requeue_running_job_excluding_keeps_id_and_owner",
    "test_unknown_job_and_node",
]

rest_cluster = local_slurm_fixture(name="rest_cluster", restd=True)


@dataclasses.dataclass
class RestLocalSlurm(LocalSlurm):
    """The same cluster, whose ``scheduler()`` is the slurmrestd backend."""

    def scheduler(self, **kwargs: Any) -> SlurmRest:  # type: ignore[override]
        return self.rest_scheduler(**kwargs)


@pytest.fixture
def slurm(rest_cluster: LocalSlurm) -> Iterator[RestLocalSlurm]:
    rest_cluster.reset()
    fields = {f.name: getattr(rest_cluster, f.name) for f in dataclasses.fields(rest_cluster)}
    yield RestLocalSlurm(**fields)


def private_file(path: Path, text: str) -> Path:
    """``text`` in ``path``, mode 0600 (a token file others may read is refused)."""
    path.write_text(text)
    path.chmod(0o600)
    return path


def mint_token(slurm: LocalSlurm, lifespan_s: int) -> str:
    out = slurm.run(["scontrol", "token", "username=root", f"lifespan={lifespan_s}"])
    return out.strip().removeprefix("SLURM_JWT=")


async def test_the_data_parser_is_the_newest_the_cluster_serves(slurm: RestLocalSlurm) -> None:
    expected = "v0.0.45" if slurm_release(slurm) >= (26, 5) else "v0.0.42"
    assert await slurm.scheduler().data_parser() == expected


async def test_an_expired_token_is_unavailable_until_the_file_is_renewed(
    slurm: RestLocalSlurm, tmp_path: Path
) -> None:
    sched = slurm.scheduler(command_timeout=20.0)
    token_file = private_file(tmp_path / "token", mint_token(slurm, 2))
    sched.client.token.path = token_file
    assert len(await sched.list_nodes()) == len(slurm.nodes)
    deadline = time.monotonic() + 30
    while True:  # until the token's two seconds are over
        try:
            await sched.list_nodes()
        except SchedulerUnavailable as exc:
            assert "token rejected" in str(exc) and str(token_file) in str(exc)
            break
        assert time.monotonic() < deadline, "a 2 s token was still accepted after 30 s"
        await asyncio.sleep(0.5)
    token_file.write_text(f"SLURM_JWT={mint_token(slurm, 600)}\n")
    assert len(await sched.list_nodes()) == len(slurm.nodes)


async def test_a_token_of_another_key_is_rejected(slurm: RestLocalSlurm, tmp_path: Path) -> None:
    sched = slurm.scheduler()
    real = mint_token(slurm, 600)
    header, payload, _ = real.split(".")
    token_file = private_file(tmp_path / "token", f"{header}.{payload}.{'A' * 43}")
    sched.client.token.path = token_file
    with pytest.raises(SchedulerUnavailable, match="token rejected"):
        await sched.list_jobs()


async def test_no_failure_against_slurmrestd_shows_the_token(
    slurm: RestLocalSlurm, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A rejected token, unknown jobs and nodes, a stopped slurmrestd: none of the errors,
    log records or reprs holds the token (real or rejected)."""
    sched = slurm.scheduler(command_timeout=5.0, verify_timeout=2.0)
    real = mint_token(slurm, 600)
    header, payload, _ = real.split(".")
    rejected = f"{header}.{payload}.{'A' * 43}"
    token_file = private_file(tmp_path / "token", f"SLURM_JWT={rejected}\n")
    sched.client.token.path = token_file
    failures: list[BaseException] = []

    async def fails(operation: Any) -> None:
        try:
            await operation
        except Exception as exc:  # each one fails: that is the point
            failures.append(exc)
        else:
            raise AssertionError("expected a failure")

    with caplog.at_level(logging.DEBUG):
        await fails(sched.list_jobs())
        await fails(sched.drain_node(slurm.nodes[0], "resurrect: test"))
        private_file(token_file, f"SLURM_JWT={real}\n")
        await fails(sched.get_job("999999"))
        await fails(sched.cancel_job("999999"))
        await fails(sched.get_node("nosuchnode"))
        slurm.stop_restd()
        try:
            await fails(sched.list_nodes())
        finally:
            slurm.start_restd()
    shown = [
        *("".join(traceback.format_exception(exc)) for exc in failures),
        *(repr(exc) for exc in failures),
        *(record.getMessage() for record in caplog.records),
        repr(vars(sched)),
        repr(vars(sched.client)),
        repr(vars(sched.client.token)),
    ]
    assert len(failures) == 6
    assert [text for text in shown if real in text or rejected in text] == []


async def test_a_restarted_slurmrestd_is_unavailable_then_answers(slurm: RestLocalSlurm) -> None:
    sched = slurm.scheduler(command_timeout=5.0)
    assert len(await sched.list_nodes()) == len(slurm.nodes)
    slurm.stop_restd()
    try:
        with pytest.raises(SchedulerUnavailable, match="slurmrestd"):
            await sched.list_nodes()
        with pytest.raises(SchedulerUnavailable):
            await sched.drain_node(slurm.nodes[0], "x")
    finally:
        slurm.start_restd()
    assert len(await sched.list_nodes()) == len(slurm.nodes)  # the same backend object


async def test_the_hold_mark_is_written_read_and_released_through_rest(
    slurm: RestLocalSlurm,
) -> None:
    """What the fail-open watchdog needs: resurrect's mark on a job it holds, read back from
    the REST API's AdminComment, and the stale hold released."""
    sched = slurm.scheduler()
    opt_in = json.dumps({"resurrect": {"max_restarts": 2}})
    job_id = slurm.submit(SLEEP_JOB, nodes=1, comment=opt_in, name="marked")
    await wait_running(slurm, job_id)
    job = await sched.get_job(job_id)
    assert json.loads(job.comment) == {"resurrect": {"max_restarts": 2}}  # the opt-in text
    assert await sched._mark_held(job) is None
    await sched._act_requeuehold(job_id)
    await asyncio.to_thread(slurm.wait_job_state, job_id, ["PENDING"], 60)
    held = await sched.get_job(job_id)
    assert held.held and has_marker(held.admin_comment)
    result = await sched.release_stale_hold(job_id, bound_s=-1.0)
    assert result.changed, result.detail
    released = await sched.get_job(job_id)
    assert not released.held and not has_marker(released.admin_comment)
    await sched.cancel_job(job_id)


def by_id(jobs: list[JobInfo]) -> dict[str, dict[str, Any]]:
    return {job.job_id: job.model_dump() for job in jobs}


def by_name(nodes: list[NodeInfo]) -> dict[str, dict[str, Any]]:
    return {node.name: node.model_dump() for node in nodes}


async def test_the_watcher_view_is_the_full_reads_view(slurm: RestLocalSlurm) -> None:
    """The REST view (job states, then the jobs in view one by one; the node snapshot and
    nodes by name) gives what SchedulerBase's view of the full ``jobs/`` and ``nodes/``
    reads gives, for running, pending, held, completed, failed, cancelled and requeued
    jobs, and down and drained nodes."""
    sched = slurm.scheduler()
    running = slurm.submit(SLEEP_JOB, nodes=1, name="running")
    lost = slurm.submit(SLEEP_JOB, nodes=1, name="lost")
    await wait_running(slurm, running)
    await wait_running(slurm, lost)
    failed = slurm.submit(["false"], nodes=1, name="failed")
    done = slurm.submit(["true"], nodes=1, name="done")
    held = [slurm.submit(["true"], nodes=1, extra_args=["--hold"]) for _ in range(3)]
    cancelled = slurm.submit(["true"], nodes=1, extra_args=["--hold"])
    slurm.run(["scancel", cancelled])
    await asyncio.to_thread(slurm.wait_job_state, failed, ["FAILED"], 60)
    await asyncio.to_thread(slurm.wait_job_state, done, ["COMPLETED"], 60)
    busy = {*(await sched.get_job(running)).nodes, *(await sched.get_job(lost)).nodes}
    victim = (await sched.get_job(lost)).nodes[0]
    drained = next(name for name in slurm.nodes if name not in busy)
    assert (await sched.drain_node(drained, "view test")).changed
    slurm.kill_node(victim)
    await asyncio.to_thread(slurm.wait_node_state, victim, ["DOWN"], 60, 0.2)
    await asyncio.to_thread(
        slurm._wait,
        lambda: slurm.job(lost),
        lambda r: r.get("Restarts") == "1" and r.get("JobState") == "RUNNING",
        90,
        0.2,
        "the lost job requeued by slurmctld and running again",
    )
    also = [held[0], done, "999999"]

    async def views() -> tuple[Any, Any]:
        rest = (
            by_id(await sched.list_active_jobs(also)),
            by_name(await sched.list_unhealthy_nodes()),
            by_name(await sched.list_nodes_named([victim, drained, "nosuchnode9"])),
            await sched.drain_census(),
        )
        full = (
            by_id(await SchedulerBase.list_active_jobs(sched, also)),
            by_name(await SchedulerBase.list_unhealthy_nodes(sched)),
            by_name(await SchedulerBase.list_nodes_named(sched, [victim, drained, "nosuchnode9"])),
            await SchedulerBase.drain_census(sched),
        )
        return rest, full

    rest, full = await views()
    for _ in range(3):  # a job or node may change between the two reads: read both again
        if rest == full:
            break
        rest, full = await views()
    assert rest == full
    jobs, unhealthy, named, (total, drains) = rest
    assert {running, lost, failed, held[0], done} == set(jobs)
    assert jobs[lost]["restart_count"] == 1
    assert set(unhealthy) == {victim} and set(named) == {victim, drained}
    assert total == len(slurm.nodes) and [node.name for node in drains] == [drained]
