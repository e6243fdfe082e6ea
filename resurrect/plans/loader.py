"""Loading, resolving and checking recovery plan files.

``load_plans(paths)`` reads plan files (user files first, then the shipped defaults), inlines
``use`` steps (rejecting cycles and unknown plans) and rejects empty plans and duplicate
names; ``check_plans(plans, registry)`` rejects any step whose activity no worker registers
or whose params that activity does not accept. Both raise :class:`PlanError` naming the
file, the plan and the step, so a bad plan stops start-up instead of a recovery midway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from resurrect.carry_over import carry_over
from resurrect.errors import PlanError
from resurrect.plans.models import PlanFile, PlanSpec, ResolvedPlan, ResolvedStep
from resurrect.yaml_text import safe_load

SHIPPED_PLANS = Path(__file__).with_name("default.yaml")


def _describe(error: ValidationError, raw: object) -> str:
    parts = []
    for item in error.errors():
        loc = item["loc"]
        where = ".".join(str(p) for p in loc)
        if (
            len(loc) >= 2
            and loc[0] == "plans"
            and isinstance(loc[1], int)
            and isinstance(raw, dict)
        ):
            plans = raw.get("plans")
            if isinstance(plans, list) and loc[1] < len(plans) and isinstance(plans[loc[1]], dict):
                where = f"plan '{plans[loc[1]].get('name', loc[1])}': {where}"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def read_plan_file(path: Path) -> PlanFile:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"{path}: cannot read plan file: {exc}") from exc
    try:
        raw = safe_load(text)
    except yaml.YAMLError as exc:
        raise PlanError(f"{path}: not valid YAML: {exc}") from exc
    try:
        return PlanFile.model_validate(raw)
    except ValidationError as exc:
        raise PlanError(f"{path}: {_describe(exc, raw)}") from exc


def _expand(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")))
        else:
            files.append(path)
    return files


def load_plans(
    paths: Sequence[Path] = (),
    *,
    include_shipped: bool = True,
    defaults: Sequence[Path] = (),
) -> list[ResolvedPlan]:
    """All plans in match order: the given files, then ``defaults`` (plugins' plan files),
    then the shipped plans. A plan in ``paths`` replaces a default plan of the same name."""
    overridable = [*_expand(defaults), *([SHIPPED_PLANS] if include_shipped else [])]
    files = _expand(paths) + overridable
    specs: dict[str, tuple[PlanSpec, Path]] = {}
    order: list[str] = []
    for file in files:
        for spec in read_plan_file(file).plans:
            if spec.name in specs:
                if file in overridable:
                    continue  # a user plan of the same name replaces a default one
                raise PlanError(
                    f"{file}: plan '{spec.name}' is also defined in {specs[spec.name][1]}"
                )
            if not spec.steps:
                raise PlanError(f"{file}: plan '{spec.name}' has no steps")
            specs[spec.name] = (spec, file)
            order.append(spec.name)
    return [_resolve(name, specs) for name in order]


def _resolve(name: str, specs: Mapping[str, tuple[PlanSpec, Path]]) -> ResolvedPlan:
    spec, file = specs[name]

    def flatten(plan_name: str, trail: tuple[str, ...]) -> list[ResolvedStep]:
        plan, plan_file = specs[plan_name]
        steps: list[ResolvedStep] = []
        for index, item in enumerate(plan.steps):
            if item.use is not None:
                if item.use not in specs:
                    raise PlanError(
                        f"{plan_file}: plan '{plan_name}' step {index + 1}:"
                        f" uses unknown plan '{item.use}'"
                    )
                if item.use in trail:
                    cycle = " -> ".join([*trail, item.use])
                    raise PlanError(
                        f"{plan_file}: plan '{plan_name}' step {index + 1}: cycle {cycle}"
                    )
                steps.extend(flatten(item.use, (*trail, item.use)))
                continue
            assert item.activity is not None
            steps.append(
                carry_over(
                    item,
                    ResolvedStep,
                    deadline_s=max(item.deadline_s, item.timeout_s),
                    from_plan=plan_name,
                )
            )
        return steps

    return ResolvedPlan(
        name=spec.name,
        source=str(file),
        when=spec.when,
        counts_against_budget=spec.counts_against_budget,
        steps=flatten(name, (name,)),
        approval=spec.approval,
    )


def check_plans(
    plans: Sequence[ResolvedPlan], registry: Mapping[str, type[BaseModel] | None]
) -> None:
    """Every step's activity is registered and accepts the step's params."""
    problems = []
    for plan in plans:
        for index, item in enumerate(plan.steps):
            where = f"{plan.source}: plan '{plan.name}' step {index + 1} ({item.activity})"
            if item.activity not in registry:
                problems.append(f"{where}: no worker registers activity '{item.activity}'")
                continue
            model = registry[item.activity]
            if model is None:
                if item.params:
                    problems.append(f"{where}: takes no params, got {sorted(item.params)}")
                continue
            try:
                model.model_validate(item.params)
            except ValidationError as exc:
                problems.append(
                    f"{where}: invalid params: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}"
                )
    if problems:
        raise PlanError("invalid recovery plans:\n  " + "\n  ".join(problems))
