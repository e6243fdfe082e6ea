"""Loading rule packs from YAML: the shipped packs plus any the user names.

Every error is a :class:`~resurrect.errors.RuleError` whose message names the file and, when
one rule is at fault, that rule's id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from resurrect.errors import RuleError
from resurrect.rules.models import LinePack, RulePack
from resurrect.yaml_text import safe_load

PACKS_DIR = Path(__file__).parent / "packs"
PackT = TypeVar("PackT", bound=LinePack[Any])


def shipped_pack_paths() -> list[Path]:
    """The packs that ship with resurrect, in a stable order."""
    return sorted(PACKS_DIR.glob("*.yaml"))


def expand_paths(paths: Iterable[Path]) -> list[Path]:
    """Files as given; a directory stands for the ``*.yaml``/``*.yml`` files in it."""
    out: list[Path] = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            out.extend(sorted([*path.glob("*.yaml"), *path.glob("*.yml")]))
        else:
            out.append(path)
    return out


def _rule_id_at(raw: object, loc: tuple[int | str, ...]) -> str | None:
    """The id of the rule a validation error location points into (``#n`` when it has none)."""
    if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int) and isinstance(raw, dict):
        rules = raw.get("rules")
        if isinstance(rules, list) and loc[1] < len(rules):
            rule = rules[loc[1]]
            rule_id = rule.get("id") if isinstance(rule, dict) else None
            return str(rule_id) if rule_id else f"#{loc[1]}"
    return None


def load_line_pack(path: Path, model: type[PackT], what: str) -> PackT:
    """Read and validate one pack file of ``model``; ``what`` names the kind in errors."""
    try:
        raw = safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RuleError(f"{path}: cannot read {what}: {exc}") from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}: not valid YAML: {exc}") from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            rule_id = _rule_id_at(raw, loc)
            where = ".".join(str(p) for p in loc)
            prefix = f"rule {rule_id}: " if rule_id else ""
            problems.append(f"{prefix}{where}: {err['msg']}")
        raise RuleError(f"{path}: invalid {what}: " + "; ".join(problems)) from exc


def load_line_packs(
    paths: Sequence[Path], model: type[PackT], what: str
) -> list[tuple[Path, PackT]]:
    """Load packs of ``model``, rejecting a rule id defined twice (naming both files)."""
    packs: list[tuple[Path, PackT]] = []
    seen: dict[str, Path] = {}
    for path in paths:
        pack = load_line_pack(path, model, what)
        for rule in pack.rules:
            if rule.id in seen:
                raise RuleError(f"{path}: rule {rule.id}: id already defined in {seen[rule.id]}")
            seen[rule.id] = path
        packs.append((path, pack))
    return packs


def load_pack(path: Path) -> RulePack:
    """Read and validate one pack file."""
    return load_line_pack(path, RulePack, "rule pack")


def load_packs(paths: Sequence[Path]) -> list[tuple[Path, RulePack]]:
    """Load packs, rejecting a rule id defined twice (naming both files)."""
    return load_line_packs(paths, RulePack, "rule pack")
