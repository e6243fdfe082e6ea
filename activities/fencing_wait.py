"""Before a requeue: wait until every node of the failed attempt that is out of contact has
certainly fenced itself (docs/fencing.md).

A node whose agent is watching (its health workflow hears it) is in contact: Slurm ends the
old attempt's steps there when the job is requeued. A node whose agent is silent, stopped or
unknown may be cut off with the old attempt's ranks alive; its agent kills them once its
lease has run out, ``FencingSettings.fenced_within_s`` after its last contact at the latest.
Its last contact is no later than the time its silence was declared (``silent_since``), or,
where that is not known, than now. The requeue waits until the latest of those deadlines.
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


async def wait_until_fenced(
    client: Client,
    cluster: str,
    nodes: Sequence[str],
    settings: FencingSettings,
    heartbeat: Callable[..., None],
) -> str:
    """Wait until every node of ``nodes`` out of contact has fenced itself; what was waited
    for ("" when nothing)."""
    if not settings.enabled or not nodes:
        return ""
    healths = await asyncio.gather(*(agent_health(client, cluster, n) for n in nodes))
    now = datetime.now(UTC)
    deadlines = {
        node: at
        for node, health in zip(nodes, healths, strict=True)
        if (at := fenced_at(health, settings, now)) is not None
    }
    if not deadlines:
        return ""
    until = max(deadlines.values())
    waited = max(0.0, until - time.time())
    while (left := until - time.time()) > 0:
        heartbeat(f"waiting {left:.1f} s for {', '.join(sorted(deadlines))} to fence")
        await asyncio.sleep(min(HEARTBEAT_EVERY_S, left))
    return (
        f"waited {waited:.1f} s for {', '.join(sorted(deadlines))} (out of contact) to have"
        f" fenced the old attempt (lease {settings.lease_s:g} s, fenced within"
        f" {settings.fenced_within_s:.1f} s of the last contact)"
    )
