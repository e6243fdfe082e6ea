"""The order in which the test processes take test files.

``deploy/run-tests.sh`` hands whole files to its test processes, each taking the next file
when it runs low. Two things decide how long the suite takes on two cores:

- a multi-minute file taken last leaves the suite waiting for that one file alone, so the
  files that run for minutes (marked ``long_running``) are handed out first;
- those files are busy on the CPU (training jobs, soaks), while most real-daemon files
  (``slurm``) spend their time waiting on Slurm's and Temporal's timers. Three CPU-bound
  files at once on two cores slow each other down, and three waiting files at once leave
  the cores idle, so the long files alternate with real-daemon files: a process that
  finishes a long file tends to take a waiting one next, and the other way round.

The order is: a long file, a real-daemon file, the next long file, the next real-daemon
file, ... (the longer list's remainder after the shorter one ends), then everything else. A
file keeps its tests together and in their order, at its most demanding test's tier; files
of one tier keep their collection order.
"""

from __future__ import annotations

from itertools import chain, zip_longest

import pytest

LONG_RUNNING = "long_running"
_TIER_MARKERS = (LONG_RUNNING, "slurm")
_LONG, _DAEMON, _REST = range(3)


def _tier(item: pytest.Item) -> int:
    for tier, marker in enumerate(_TIER_MARKERS):
        if item.get_closest_marker(marker) is not None:
            return tier
    return len(_TIER_MARKERS)


def _alternate(first: list[str], second: list[str]) -> list[str]:
    pairs = zip_longest(first, second)
    return [path for path in chain.from_iterable(pairs) if path is not None]


def longest_files_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: long files alternating with real-daemon files, then the
    rest; each file's tests together and in their order."""
    tier: dict[str, int] = {}
    files: list[str] = []
    for item in items:
        path = str(item.path)
        if path not in tier:
            files.append(path)
        tier[path] = min(tier.get(path, _REST), _tier(item))
    by_tier = {t: [path for path in files if tier[path] == t] for t in (_LONG, _DAEMON, _REST)}
    order = _alternate(by_tier[_LONG], by_tier[_DAEMON]) + by_tier[_REST]
    position = {path: index for index, path in enumerate(order)}
    items.sort(key=lambda item: position[str(item.path)])
