"""How the faults of hosts in namespaces are injected on the live soak (``HOST_KINDS``): a
cut link (both ways, one way, shorter than the grace, never healed), an agent's liveness path
cut, the worker cut from Temporal, a frozen host, a crashed host, a lossy link.

A node fault picks a running opted-in job's last node. What comes back after a heal is left
to resurrect: the soak never resumes such a node itself; the repair workflow's health check
must return it (``invariants.HealedNodesReturnByRepair``). A crashed host is "rebooted" by
the operator (its slurmd and agent started again) once resurrect drained it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from .faults import BY_NAME
from .history import FaultRecord
from .inject import Injector, jobs_on, pick_healthy_node, pick_job

if TYPE_CHECKING:
    from .schedule import Injection
    from .soak import Soak

LOSS_PCT = 20
# A node healed (or rebooted) is watched this long for its return to service.
RETURN_WAIT_S = 240.0


async def _hit_node(soak: Soak, injection: Injection, record: FaultRecord) -> str:
    job = pick_job(soak, injection)
    node = job.nodes[-1]
    record.job_id, record.node = job.job_id, node
    record.affected_jobs = jobs_on(soak, node)
    soak.faulted_nodes[node] = record
    return node


def _cut(way: str) -> Injector:
    async def inject(soak: Soak, injection: Injection, record: FaultRecord) -> None:
        node = await _hit_node(soak, injection, record)
        await asyncio.to_thread(soak.cluster.partition, node, way)
        record.detail = f"cut {way}"
        kind = BY_NAME[injection.kind]
        if kind.duration_s <= 0:  # never healed: the soak's end undoes it
            soak.never_healed.add(node)
            return
        try:
            await asyncio.sleep(kind.duration_s)
        finally:
            await asyncio.to_thread(soak.cluster.heal, node)
        record.ended_at = time.time()
        soak.watch_return(node, record)

    return inject


async def agent_partition(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    node = pick_healthy_node(soak, injection)
    record.node = node
    record.affected_jobs = jobs_on(soak, node)
    await asyncio.to_thread(soak.cluster.agent_partition, node, soak.relay_port)
    try:
        await asyncio.sleep(BY_NAME["agent_partition"].duration_s)
    finally:
        await asyncio.to_thread(soak.cluster.heal, node)
    record.ended_at = time.time()


async def worker_partition(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    await asyncio.to_thread(soak.cluster.worker_partition, soak.temporal_port)
    try:
        await asyncio.sleep(BY_NAME["worker_partition"].duration_s)
    finally:
        await asyncio.to_thread(soak.cluster.heal, "worker")
    record.ended_at = time.time()


async def host_freeze(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    node = await _hit_node(soak, injection, record)
    await asyncio.to_thread(soak.cluster.freeze_host, node)
    soak.frozen_hosts.add(node)
    try:
        await asyncio.sleep(BY_NAME["host_freeze"].duration_s)
    finally:
        await asyncio.to_thread(soak.cluster.thaw_host, node)
        soak.frozen_hosts.discard(node)
    record.ended_at = time.time()
    soak.watch_return(node, record)


async def host_crash(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    node = await _hit_node(soak, injection, record)
    soak.agents[node].held_down = True  # its process dies with the host: not restarted yet
    record.detail = (await asyncio.to_thread(soak.cluster.crash_host, node)).strip()
    await soak.drained_or_timeout(node)
    await asyncio.to_thread(soak.cluster.start_node, node)  # the operator reboots it
    if node not in soak.agent_down:
        soak.agents[node].start()
    record.ended_at = time.time()
    soak.watch_return(node, record)


async def lossy_link(soak: Soak, injection: Injection, record: FaultRecord) -> None:
    node = await _hit_node(soak, injection, record)
    record.detail = (await asyncio.to_thread(soak.cluster.lossy, node, LOSS_PCT)).strip()
    try:
        await asyncio.sleep(BY_NAME["lossy_link"].duration_s)
    finally:
        await asyncio.to_thread(soak.cluster.heal, node)
    record.ended_at = time.time()
    soak.faulted_nodes.pop(node, None)


HOST_INJECTORS: dict[str, Injector] = {
    "partition": _cut("both"),
    "partition_one_way": _cut("out"),
    "partition_short": _cut("both"),
    "partition_forever": _cut("both"),
    "agent_partition": agent_partition,
    "worker_partition": worker_partition,
    "host_freeze": host_freeze,
    "host_crash": host_crash,
    "lossy_link": lossy_link,
}
