"""Loading progress-rule packs from YAML: the shipped ones plus any the user names.

Every error is a :class:`~resurrect.errors.RuleError` naming the file (and the rule)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from resurrect.progress.models import ProgressPack, ProgressRule
from resurrect.rules.loader import load_line_pack, load_line_packs

PACKS_DIR = Path(__file__).parent / "packs"


def shipped_progress_pack_paths() -> list[Path]:
    return sorted(PACKS_DIR.glob("*.yaml"))


def load_progress_pack(path: Path) -> ProgressPack:
    return load_line_pack(path, ProgressPack, "progress pack")


def load_progress_rules(paths: Sequence[Path] | None = None) -> list[ProgressRule]:
    """The rules of the given packs (default: the shipped ones); an id defined twice is an error."""
    packs = shipped_progress_pack_paths() if paths is None else paths
    return [
        rule
        for _, pack in load_line_packs(packs, ProgressPack, "progress pack")
        for rule in pack.rules
    ]
