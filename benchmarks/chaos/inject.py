"""How each fault kind is injected on the live soak (``faults.py`` says what each is).

Every injector takes the :class:`~.soak.Soak` and the scheduled :class:`~.schedule.Injection`,
picks its target among what the cluster offers at that moment (``Injection.choose``), does
the damage, and returns the :class:`FaultRecord`; one that finds nothing to hit returns it
``skipped`` with the reason. Faults that last undo themselves after ``duration_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from resurrect.contracts import RUNNING_JOB_STATES, JobInfo, JobState
from resurrect.demo.scenarios.checkpoint_damage import damage_newest_checkpoint
from resurrect.demo.scenarios.straggler import duty_cycle
from resurrect.demo.stage import checkpoint_steps
from resurrect.errors import ResurrectError
from resurrect.stacks.processes import job_rank_processes

from .faults import BY_NAME
from .history import FaultRecord
from .jobs import append_line as _append_line

if TYPE_CHECKING:
    from .schedule import Injection
    from .soak import Soak

Injector = Callable[["Soak", "Injection", FaultRecord], Awaitable[None]]

APP_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 301, in <module>\n'
    "    main()\n"
    '  File "train.py", line 268, in main\n'
    "    idx = batch_indices(args.seed, step, args.batch_size, rank, world)\n"
    "ValueError: batch of 33 rows does not match the model's 32 (chaos soak: injected"
    " application error)"
)


# A second fault waits at most this long for a recovery to be in flight.
SECOND_FAULT_WAIT_S = 90.0


class Skip(Exception):
    """The injection found nothing to hit; the message says why."""


def gpu_line(node: str, pid: int) -> str:
    """What NCCL prints when the GPU under a rank fails (train.py's fail_like_a_lost_gpu)."""
    return f"{node}:{pid}:{pid} [0] NCCL WARN Cuda failure 'uncorrectable ECC error encountered'"


def fake_xid_line(pid: int) -> str:
    return f"NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, name=python, GPU has fallen off the bus."


def append_line(path: Path, line: str) -> None:
    """Print ``line`` into a job's output as the job would; a job that has not opened its
    output yet is not hit (creating the file would lock the job's attempts out of it)."""
    try:
        _append_line(path, line)
    except FileNotFoundError as exc:
        raise Skip(f"the job has no output file yet ({path.name})") from exc


# ------------------------------------------------------------------ targets
def running_jobs(soak: Soak, *, opted_in: bool, min_world: int = 1) -> dict[str, JobInfo]:
    return {
        jid: info
        for jid, info in soak.job_info.items()
        if info.state is JobState.RUNNING
        and soak.submitted[jid].shape.opted_in == opted_in
        and soak.submitted[jid].shape.world >= min_world
        and not set(soak.faulted_nodes).intersection(info.nodes)
    }


def pick_job(
    soak: Soak, injection: Injection, *, opted_in: bool = True, min_world: int = 1
) -> JobInfo:
    """The running job ``injection`` hits: opted in or not, with at least ``min_world`` ranks
    (a fault of one rank among its peers needs peers)."""
    jobs = running_jobs(soak, opted_in=opted_in, min_world=min_world)
    chosen = injection.choose(list(jobs))
    if chosen is None:
        ranks = f" of {min_world} ranks or more" if min_world > 1 else ""
        raise Skip("no running job " + ("opted in" if opted_in else "that is not opted in") + ranks)
    return jobs[chosen]


def jobs_on(soak: Soak, node: str) -> list[str]:
    return sorted(
        jid
        for jid, info in soak.job_info.items()
        if node in info.nodes and info.state in (JobState.RUNNING, JobState.COMPLETING)
    )


def rank_on(soak: Soak, job: JobInfo, node: str | None = None) -> tuple[int, str]:
    """(pid, node) of one of the job's rank processes (as root, from /proc)."""
    owner = pwd.getpwnam(soak.cluster.demo_user).pw_uid
    ranks = [
        p
        for p in job_rank_processes(
            job.job_id, owner_uid=owner, node=node, slurm_conf=soak.cluster.slurm_conf
        )
        if p.rank is not None and (node is None or p.node == node)
    ]
    if not ranks:
        raise Skip(f"job {job.job_id} has no rank process yet")
    chosen = max(ranks, key=lambda p: p.rank or 0)
    return chosen.pid, chosen.node or (node or "")


def output_of(soak: Soak, job_id: str) -> Path:
    return soak.submitted[job_id].output


# ------------------------------------------------------------------ job and node faults
async def lose_node(soak: Soak, node: str, record: FaultRecord) -> None:
    """SIGKILL the node's agent and its slurmd with every process of its job steps."""
    record.node = node
    record.affected_jobs = sorted(set(record.affected_jobs) | set(jobs_on(soak, node)))
    soak.faulted_nodes[node] = record
    soak.agents[node].kill()
    await asyncio.to_thread(soak.cluster.kill_node, node)
    soak.repair_later(node, record)


async def node_loss(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    job = pick_job(soak, injection)
    record.job_id = job.job_id
    await lose_node(soak, job.nodes[-1], record)


async def gpu_fatal(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    job = pick_job(soak, injection)
    pid, node = await asyncio.to_thread(rank_on, soak, job, job.nodes[-1])
    record.job_id, record.node = job.job_id, node
    record.affected_jobs = jobs_on(soak, node)
    soak.faulted_nodes[node] = record
    append_line(output_of(soak, job.job_id), gpu_line(node, pid))
    process = soak.agents[node].process
    if process is not None:
        os.kill(process.pid, signal.SIGUSR1)  # its NVML: Xid 48 on GPU 0
    soak.repair_later(node, record)


async def rank_hang(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    # its peers block in a collective: a lone rank stopped is a silent job, which resurrect
    # judges only after progress.hang_unconfirmed_s (15 minutes)
    job = pick_job(soak, injection, min_world=2)
    pid, node = await asyncio.to_thread(rank_on, soak, job)
    record.job_id, record.node, record.affected_jobs = job.job_id, node, [job.job_id]
    os.kill(pid, signal.SIGSTOP)
    record.detail = f"stopped pid {pid}"
    soak.stopped_pids.add(pid)


async def straggler(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    job = pick_job(soak, injection, min_world=2)  # slower than its peers: it needs peers
    pid, node = await asyncio.to_thread(rank_on, soak, job)
    record.job_id, record.node, record.affected_jobs = job.job_id, node, [job.job_id]
    duty = asyncio.create_task(duty_cycle(pid))
    try:
        await asyncio.sleep(BY_NAME["straggler"].duration_s)
    finally:
        duty.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await duty
        record.ended_at = time.time()


async def torn_checkpoint(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    jobs = running_jobs(soak, opted_in=True)
    ready = {
        jid: info
        for jid, info in jobs.items()
        if (ckpt := soak.submitted[jid].ckpt_dir) is not None and len(checkpoint_steps(ckpt)) >= 2
    }
    chosen = injection.choose(list(ready))
    if chosen is None:
        raise Skip("no running job with two checkpoints")
    job = ready[chosen]
    ckpt_dir = soak.submitted[chosen].ckpt_dir
    assert ckpt_dir is not None
    record.job_id = chosen
    record.detail = "truncated " + await asyncio.to_thread(damage_newest_checkpoint, ckpt_dir)
    await lose_node(soak, job.nodes[-1], record)


async def fake_xid(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    job = pick_job(soak, injection)
    record.job_id, record.node, record.affected_jobs = job.job_id, job.nodes[0], [job.job_id]
    append_line(output_of(soak, job.job_id), fake_xid_line(4242))


async def app_exception(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    job = pick_job(soak, injection)
    record.job_id, record.affected_jobs = job.job_id, [job.job_id]
    record.node = await crash_with_traceback(soak, job)
    soak.recurring_app_fault(job.job_id, job.restart_count)


async def crash_with_traceback(soak: Soak, job: JobInfo) -> str:
    """The job prints a traceback and one of its ranks dies (the bug recurs every attempt)."""
    pid, node = await asyncio.to_thread(rank_on, soak, job)
    append_line(output_of(soak, job.job_id), APP_TRACEBACK)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return node


async def second_fault(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    deadline = time.monotonic() + SECOND_FAULT_WAIT_S
    chosen = injection.choose(await soak.jobs_recovering())
    while chosen is None and time.monotonic() < deadline:  # the next recovery to start
        await asyncio.sleep(1.0)
        chosen = injection.choose(await soak.jobs_recovering())
    if chosen is None:
        raise Skip(f"no recovery in flight within {SECOND_FAULT_WAIT_S:.0f} s")
    record.at = time.time()
    info = soak.job_info[chosen]
    nodes = [n for n in info.nodes if n not in soak.faulted_nodes]
    if not nodes:
        raise Skip(f"job {chosen} (recovering) holds no healthy node")
    record.job_id, record.affected_jobs = chosen, [chosen]
    await lose_node(soak, nodes[-1], record)


async def not_opted_in(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    job = pick_job(soak, injection, opted_in=False)
    node = job.nodes[0]
    record.job_id, record.node, record.affected_jobs = job.job_id, node, [job.job_id]
    append_line(output_of(soak, job.job_id), gpu_line(node, 4243))


# ------------------------------------------------------------------ resurrect's parts
def _restart_after(part: str) -> Injector:
    async def inject(soak: Soak, injection: Injection, record: FaultRecord) -> None:
        target = soak.parts[part]
        target.kill()
        await asyncio.sleep(BY_NAME[injection.kind].duration_s)
        target.start()
        record.ended_at = time.time()

    return inject


def pick_healthy_node(soak: Soak, injection: Injection) -> str:
    """A node no injected fault is on now."""
    node = injection.choose([n for n in soak.cluster.nodes if n not in soak.faulted_nodes])
    if node is None:
        raise Skip("no healthy node")
    return node


async def launch_failure(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    """An idle node's Prolog fails for a while (deploy/local-slurm/prolog-fail-marked.sh):
    the job Slurm launches there meanwhile, a restart or a new job, is requeued and held by
    slurmctld ("launch failed requeued held") and the node drained by it ("Prolog error").
    Then the operator mends the prolog: resumes the node and releases the jobs Slurm still
    holds after a failed launch there that no one else will (those not opted in)."""
    busy = {
        n for info in soak.job_info.values() if info.state in RUNNING_JOB_STATES for n in info.nodes
    }
    node = injection.choose(
        [n for n in soak.cluster.nodes if n not in soak.faulted_nodes and n not in busy]
    )
    if node is None:
        raise Skip("no idle healthy node")
    record.node = node
    marks = soak.cluster.state_dir / "prolog-fail"
    marks.mkdir(exist_ok=True)
    marker = marks / node
    soak.faulted_nodes[node] = record  # jobs that land there are the ones it hits
    marker.touch()
    try:
        await asyncio.sleep(BY_NAME["launch_failure"].duration_s)
    finally:
        marker.unlink(missing_ok=True)
    refused_log = marks / f"{node}.refused"
    lines = refused_log.read_text().splitlines() if refused_log.exists() else []
    refusals = [(job_id, float(at)) for job_id, at in (line.split() for line in lines)]
    refused = list(dict.fromkeys(job_id for job_id, _ in refusals))
    ours = {j for j in refused if j in soak.submitted and soak.submitted[j].shape.opted_in}
    opted_in = [(j, at) for j, at in refusals if j in ours]
    record.detail = f"launches refused: {', '.join(refused) or 'none'}"
    if opted_in:
        # timed from the refused launch of the opted-in job it hit, not from the marking
        record.job_id, record.at = opted_in[0]
        record.affected_jobs = sorted({j for j, _ in opted_in})
    else:
        record.affected_jobs = []
        record.skipped = "no opted-in job was launched there while its prolog failed" + (
            f" (refused, not opted in: {', '.join(refused)}: released by the operator)"
            if refused
            else ""
        )
    scheduler = soak.cluster.scheduler()
    with contextlib.suppress(ResurrectError):
        if (await scheduler.get_node(node)).reason.startswith("Prolog error"):
            await asyncio.to_thread(
                soak.cluster.run,
                ["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                check=False,
            )
    for job_id in refused:
        if job_id in ours or job_id not in soak.submitted:
            continue
        with contextlib.suppress(ResurrectError):
            if (await scheduler.get_job(job_id)).held_after_failed_launch:
                await asyncio.to_thread(
                    soak.cluster.run, ["scontrol", "release", job_id], check=False
                )
    if soak.faulted_nodes.get(node) is record:
        soak.faulted_nodes.pop(node, None)
    record.ended_at = time.time()


async def agent_kill(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    node = pick_healthy_node(soak, injection)
    record.node = node
    # its silence may look like a lost node: the jobs there may be requeued once for it
    record.affected_jobs = jobs_on(soak, node)
    soak.agent_down.add(node)
    try:
        soak.agents[node].kill()
        await asyncio.sleep(BY_NAME["agent_kill"].duration_s)
        if node not in soak.faulted_nodes:  # a node fault since: its repair starts it
            soak.agents[node].start()
    finally:
        soak.agent_down.discard(node)
    record.ended_at = time.time()


async def temporal_kill(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    await asyncio.to_thread(soak.kill_temporal)
    await asyncio.sleep(BY_NAME["temporal_kill"].duration_s)
    await asyncio.to_thread(soak.start_temporal)
    record.ended_at = time.time()


async def slurmctld_restart(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    # a running job's srun that asks slurmctld for something while it is down fails ("Unable
    # to confirm allocation for job N: Unable to contact slurm controller"): its attempt
    # ends, and any running job may be requeued once for it
    record.affected_jobs = sorted(
        jid for jid, info in soak.job_info.items() if info.state is JobState.RUNNING
    )
    await asyncio.to_thread(soak.cluster.stop_controller)
    await asyncio.sleep(BY_NAME["slurmctld_restart"].duration_s)
    await asyncio.to_thread(soak.cluster.start_controller)
    record.ended_at = time.time()


async def liveness_drop(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    # every agent falls silent at once: any running job may be requeued once for it
    record.affected_jobs = sorted(
        jid for jid, info in soak.job_info.items() if info.state is JobState.RUNNING
    )
    soak.relay.dropping = True
    try:
        await asyncio.sleep(BY_NAME["liveness_drop"].duration_s)
    finally:
        soak.relay.dropping = False
    record.ended_at = time.time()
    record.detail = f"{soak.relay.dropped} datagrams dropped so far"


async def state_disk_full(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    filler = soak.state_dir / ".chaos-filler"
    written = await asyncio.to_thread(fill, filler)
    record.detail = f"{written} bytes filled the state directory's file system"
    try:
        await asyncio.sleep(BY_NAME["state_disk_full"].duration_s)
    finally:
        filler.unlink(missing_ok=True)
    record.ended_at = time.time()


def fill(path: Path) -> int:
    """Write zeros to ``path`` until its file system is full; the bytes written."""
    written = 0
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as out:
        while True:
            try:
                written += out.write(chunk)
            except OSError:
                break
    return written


INJECTORS: dict[str, Injector] = {
    "node_loss": node_loss,
    "gpu_fatal": gpu_fatal,
    "rank_hang": rank_hang,
    "straggler": straggler,
    "torn_checkpoint": torn_checkpoint,
    "fake_xid": fake_xid,
    "app_exception": app_exception,
    "second_fault": second_fault,
    "not_opted_in": not_opted_in,
    "worker_kill": _restart_after("worker"),
    "watcher_kill": _restart_after("watcher"),
    "agent_kill": agent_kill,
    "temporal_kill": temporal_kill,
    "slurmctld_restart": slurmctld_restart,
    "liveness_drop": liveness_drop,
    "state_disk_full": state_disk_full,
    "launch_failure": launch_failure,
}
