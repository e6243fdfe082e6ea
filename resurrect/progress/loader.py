"""Loading progress-rule packs from YAML: the shipped ones plus any the user names.

Every error is a :class:`~resurrect.errors.RuleError` naming the file (and the rule)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import ValidationError

from resurrect.errors import RuleError
from resurrect.progress.models import ProgressPack, ProgressRule

PACKS_DIR = Path(__file__).parent / "packs"


def shipped_progress_pack_paths() -> list[Path]:
    return sorted(PACKS_DIR.glob("*.yaml"))


def load_progress_pack(path: Path) -> ProgressPack:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RuleError(f"{path}: cannot read progress pack: {exc}") from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}: not valid YAML: {exc}") from exc
    try:
        return ProgressPack.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            rule = ""
            if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
                rules = raw.get("rules") if isinstance(raw, dict) else None
                if isinstance(rules, list) and loc[1] < len(rules):
                    entry = rules[loc[1]]
                    rule_id = entry.get("id") if isinstance(entry, dict) else None
                    rule = f"rule {rule_id or '#' + str(loc[1])}: "
            problems.append(f"{rule}{'.'.join(str(p) for p in loc)}: {err['msg']}")
        raise RuleError(f"{path}: invalid progress pack: " + "; ".join(problems)) from exc


def load_progress_rules(paths: Sequence[Path] | None = None) -> list[ProgressRule]:
    """The rules of the given packs (default: the shipped ones); an id defined twice is an error."""
    rules: list[ProgressRule] = []
    seen: dict[str, Path] = {}
    for path in shipped_progress_pack_paths() if paths is None else paths:
        for rule in load_progress_pack(path).rules:
            if rule.id in seen:
                raise RuleError(f"{path}: rule {rule.id}: id already defined in {seen[rule.id]}")
            seen[rule.id] = path
            rules.append(rule)
    return rules
