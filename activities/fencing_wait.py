"""Before a requeue: wait until every node of the failed attempt that is out of contact has
certainly fenced itself (docs/fencing.md).

A node whose agent is watching (its health workflow hears it) is in contact: Slurm ends the
old attempt's steps there when the job is requeued. A node whose agent is silent, stopped or
unknown may be cut off with the old attempt's ranks alive; its agent kills them once its
lease has run out, ``FencingSettings.fenced_within_s`` after its last contact at the latest.
Its last contact is no later than the time its silence was declared (``silent_since``), or,
where that is not known, than now. The requeue decides the deadline before it holds the job
(a first attempt run as a quick local activity that would wait past its budget asks for more
time instead: a cancelled wait must never release the job early), then holds it and waits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from temporalio.client import Client

from resurrect.activities.agent_health import WATCHING_STATUSES, agent_health
from resurrect.config import FencingSettings
from resurrect.contracts.node_health import NodeHealth

HEARTBEAT_EVERY_S = 1.0


def fenced_at(health: NodeHealth | None, settings: FencingSettings, now: datetime) -> float | None:
    """The epoch second by which the node of ``health`` has fenced itself, or None when it
    is in contact (nothing to wait for)."""
    if health is not None and health.status in WATCHING_STATUSES:
        return None
    last_contact = now
    if health is not None and health.status == "silent" and health.silent_since is not None:
        since = health.silent_since
        last_contact = min(now, since if since.tzinfo else since.replace(tzinfo=UTC))
    return last_contact.timestamp() + settings.fenced_within_s


async def fence_deadline(
    client: Client, cluster: str, nodes: Sequence[str], settings: FencingSettings
) -> tuple[float, list[str]]:
    """(epoch second by which every node of ``nodes`` out of contact has fenced itself, those
    nodes); (0, []) when fencing is off or every node is in contact."""
    if not settings.enabled or not nodes:
        return 0.0, []
    healths = await asyncio.gather(*(agent_health(client, cluster, n) for n in nodes))
    now = datetime.now(UTC)
    deadlines = {
        node: at
        for node, health in zip(nodes, healths, strict=True)
        if (at := fenced_at(health, settings, now)) is not None
    }
    return (max(deadlines.values()), sorted(deadlines)) if deadlines else (0.0, [])


async def sleep_until(until: float, nodes: Sequence[str], heartbeat: Callable[..., None]) -> None:
    """Sleep until epoch second ``until``, heartbeating every second."""
    while (left := until - time.time()) > 0:
        heartbeat(f"waiting {left:.1f} s for {', '.join(nodes)} to fence")
        await asyncio.sleep(min(HEARTBEAT_EVERY_S, left))


def waited_note(waited: float, nodes: Sequence[str], settings: FencingSettings) -> str:
    return (
        f"waited {waited:.1f} s for {', '.join(nodes)} (out of contact) to have fenced the old"
        f" attempt (lease {settings.lease_s:g} s, fenced within {settings.fenced_within_s:.1f} s"
        " of the last contact)"
    )
