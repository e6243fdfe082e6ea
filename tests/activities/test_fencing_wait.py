"""The requeue waits for a node out of contact to have fenced itself, from the time its
silence was declared (or from now when that is unknown); a node in contact costs no wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from resurrect.activities.fencing_wait import fenced_at
from resurrect.config import FencingSettings
from resurrect.contracts.node_health import NodeHealth

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SETTINGS = FencingSettings(enabled=True, lease_s=10)


def health(status: str, silent_since: datetime | None = None) -> NodeHealth:
    return NodeHealth(cluster="c", node="n1", status=status, silent_since=silent_since)  # type: ignore[arg-type]


def test_a_watching_agent_means_no_wait() -> None:
    for status in ("healthy", "degraded", "faulty"):
        assert fenced_at(health(status), SETTINGS, NOW) is None


def test_a_silent_node_is_waited_for_from_when_its_silence_was_declared() -> None:
    since = NOW - timedelta(seconds=4)
    assert fenced_at(health("silent", since), SETTINGS, NOW) == (
        since.timestamp() + SETTINGS.fenced_within_s
    )


def test_unknown_stopped_or_no_agent_is_waited_for_from_now() -> None:
    for found in (None, health("unknown"), health("stopped"), health("silent")):
        assert fenced_at(found, SETTINGS, NOW) == NOW.timestamp() + SETTINGS.fenced_within_s


def test_a_silence_declared_in_the_future_of_this_clock_counts_from_now() -> None:
    later = NOW + timedelta(seconds=30)  # the watcher's clock ahead of the worker's
    assert fenced_at(health("silent", later), SETTINGS, NOW) == (
        NOW.timestamp() + SETTINGS.fenced_within_s
    )
