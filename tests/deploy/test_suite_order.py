"""The suite hands its longest files out first, alternating with real-daemon files
(tests/support/scheduling.py), so that deploy/run-tests.sh's test processes keep both cores
busy and end together."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from support.scheduling import longest_files_first


@dataclass
class _Item:
    path: Path
    name: str
    markers: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def _order(items: list[_Item]) -> list[str]:
    as_items = cast(list[pytest.Item], items)
    longest_files_first(as_items)
    return [cast(Any, item).name for item in as_items]


def test_files_that_run_for_minutes_come_first_then_real_daemon_files_then_the_rest() -> None:
    unit, daemon, soak = Path("test_unit.py"), Path("test_daemon.py"), Path("test_soak.py")
    items = [
        _Item(unit, "u1"),
        _Item(daemon, "d1", {"slurm"}),
        _Item(unit, "u2"),
        _Item(soak, "s1", {"slurm", "long_running"}),
    ]
    assert _order(items) == ["s1", "d1", "u1", "u2"]


def test_long_files_alternate_with_real_daemon_files_until_the_shorter_list_ends() -> None:
    long_a, long_b, long_c = Path("test_la.py"), Path("test_lb.py"), Path("test_lc.py")
    daemon_a, unit = Path("test_da.py"), Path("test_unit.py")
    items = [
        _Item(unit, "u1"),
        _Item(long_a, "la", {"long_running"}),
        _Item(daemon_a, "da", {"slurm"}),
        _Item(long_b, "lb", {"slurm", "long_running"}),
        _Item(long_c, "lc", {"long_running"}),
    ]
    assert _order(items) == ["la", "da", "lb", "lc", "u1"]


def test_a_file_stays_together_in_its_order_at_its_most_demanding_tests_tier() -> None:
    mixed, other = Path("test_mixed.py"), Path("test_other.py")
    items = [
        _Item(other, "o1", {"slurm"}),
        _Item(mixed, "m1"),
        _Item(mixed, "m2", {"slurm", "long_running"}),
        _Item(mixed, "m3"),
    ]
    assert _order(items) == ["m1", "m2", "m3", "o1"]


def test_files_of_one_tier_keep_their_collection_order() -> None:
    a, b, c = Path("test_a.py"), Path("test_b.py"), Path("test_c.py")
    items = [_Item(b, "b1"), _Item(a, "a1"), _Item(c, "c1"), _Item(b, "b2")]
    assert _order(items) == ["b1", "b2", "a1", "c1"]
