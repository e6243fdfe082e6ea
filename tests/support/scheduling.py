"""The order in which the test processes take test files: the longest first.

``deploy/run-tests.sh`` hands whole files to its test processes, each taking the next file
when it runs low. Files taken in collection order leave a multi-minute file to whichever
process reaches it last, and the suite then waits for that one file alone. Taking the longest
files first (longest-processing-time-first) lets the short ones fill every process's tail, so
the processes end together:

1. files marked ``long_running`` (each runs for minutes);
2. files of real-daemon tests (``slurm``);
3. everything else.

A file keeps its tests together and in their order; files of one tier keep theirs.
"""

from __future__ import annotations

import pytest

LONG_RUNNING = "long_running"
_TIER_MARKERS = (LONG_RUNNING, "slurm")


def _tier(item: pytest.Item) -> int:
    for tier, marker in enumerate(_TIER_MARKERS):
        if item.get_closest_marker(marker) is not None:
            return tier
    return len(_TIER_MARKERS)


def longest_files_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: files by tier (their most demanding test's), then by where
    the file was first collected."""
    tier: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        path = str(item.path)
        first_seen.setdefault(path, index)
        tier[path] = min(tier.get(path, len(_TIER_MARKERS)), _tier(item))
    items.sort(key=lambda item: (tier[str(item.path)], first_seen[str(item.path)]))
