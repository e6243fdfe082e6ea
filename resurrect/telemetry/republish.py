"""Gauges recomputed on a period: a publisher's ``publish_once`` run now and every interval
until the service stops, a failed pass logged and tried again at the next one (metrics must
never stop the service)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


async def republish_until(
    stop: asyncio.Event,
    interval_s: float,
    publish_once: Callable[[], Awaitable[object]],
    what: str,
) -> None:
    """Run ``publish_once`` every ``interval_s`` until ``stop`` is set; a failure is logged
    as "``what`` metrics not updated" and the next pass runs on time."""
    while not stop.is_set():
        try:
            await publish_once()
        except Exception as exc:  # metrics must never stop the service
            log.warning("%s metrics not updated: %s", what, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
