"""``resurrect plans check [PATH...]`` and ``resurrect plans show``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from resurrect.command_line import add_config_arg
from resurrect.config import load_config
from resurrect.errors import PluginError


def _catalogue(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from resurrect.workers.recovery_worker import load_catalogue

    config = load_config(args.config)
    if args.paths:
        config.plans.paths = [*args.paths, *config.plans.paths]
    return load_catalogue(config)


def _check(args: argparse.Namespace) -> int:
    try:
        catalogue = _catalogue(args)
    except PluginError as exc:
        print(f"resurrect plans: {exc}", file=sys.stderr)
        return 1
    for error in catalogue.plugin_errors:
        print(f"warning: {error}", file=sys.stderr)
    for plan in catalogue.plans:
        steps = " -> ".join(step.activity for step in plan.steps)
        print(f"ok  {plan.name:<28} {steps}  ({plan.source})")
    print(f"{len(catalogue.plans)} plans valid against {len(catalogue.steps)} registered steps")
    return 0


def _show(args: argparse.Namespace) -> int:
    catalogue = _catalogue(args)
    if args.json:
        print(json.dumps([plan.model_dump(mode="json") for plan in catalogue.plans], indent=2))
        return 0
    print("registered steps:")
    from resurrect.steps.runtime import step_meta

    for name, fn in sorted(catalogue.steps.items()):
        meta = step_meta(fn)
        kind = "mutating" if meta.mutating else "read-only"
        print(f"  {name:<32} {kind:<10} {meta.description}")
    print("plans (first match wins):")
    for plan in catalogue.plans:
        when = plan.when.model_dump(exclude_defaults=True, mode="json")
        print(f"  {plan.name:<28} when {json.dumps(when) if when else 'always'}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plans = sub.add_parser("plans", help="validate and show recovery plans")
    plans_sub = plans.add_subparsers(dest="plans_command", metavar="ACTION", required=True)
    check = plans_sub.add_parser("check", help="validate plan files against the registered steps")
    check.add_argument(
        "paths", nargs="*", type=Path, help="plan files or folders (plus the config's)"
    )
    add_config_arg(check)
    check.set_defaults(handler=_check)
    show = plans_sub.add_parser("show", help="list registered steps and plans in match order")
    show.add_argument("paths", nargs="*", type=Path)
    add_config_arg(show)
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_show)
