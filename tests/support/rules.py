"""Real rule engines over a few rules written for a test (instead of fake engines).

``engine_of`` builds :class:`~resurrect.rules.engine.RuleEngine` from rules given as a
pack's YAML would give them, so a test's expectations rest on the engine's real matching,
prefix stripping and evidence building, with no shipped pack in the way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from resurrect.rules.engine import RuleEngine
from resurrect.rules.models import Rule


def engine_of(*rules: dict[str, Any], pack: str = "test") -> RuleEngine:
    """An engine over only these rules (each a rule of a pack: id, literal, pattern ...)."""
    source = Path(f"{pack}.yaml")
    return RuleEngine(
        [(source, Rule.model_validate(rule)) for rule in rules], pack_names={source: pack}
    )
