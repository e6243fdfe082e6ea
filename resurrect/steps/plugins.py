"""Plugins: Python packages that add recovery steps (and plans) to resurrect.

A plugin package declares an entry point in the ``resurrect.plugins`` group whose name is
the plugin's namespace and whose object is a :class:`resurrect.sdk.Plugin`::

    [project.entry-points."resurrect.plugins"]
    webhook = "resurrect_webhook.plugin:PLUGIN"

Nothing runs unless the configuration names it (``plugins.enabled: [webhook]``). Its steps
are named ``<namespace>.<step>`` in ``@step`` (``@step("webhook.post")``), which is also
their activity name and how plans call them. Two installed plugins
claiming one namespace, or two steps claiming one activity name, fail start-up with both
named. A plugin that fails to import is reported by name; the others load regardless.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from pydantic import BaseModel

from resurrect.errors import PluginError
from resurrect.steps.runtime import StepFn, step_meta

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "resurrect.plugins"


@dataclass(frozen=True)
class Plugin:
    """What a plugin package exports: its namespace, its steps, optional plan files."""

    name: str
    steps: Sequence[StepFn]
    plans: Sequence[Path] = ()
    description: str = ""


@dataclass
class LoadedPlugins:
    plugins: list[Plugin] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = f"{dist.name} {dist.version}" if dist is not None else "unknown distribution"
    return f"{name} ({ep.value})"


def discover(
    enabled: Sequence[str], available: Iterable[EntryPoint] | None = None
) -> LoadedPlugins:
    """Load the enabled plugins; import failures are collected, conflicts raise."""
    points = list(available if available is not None else entry_points(group=ENTRY_POINT_GROUP))
    by_name: dict[str, EntryPoint] = {}
    for ep in points:
        if ep.name in by_name and by_name[ep.name].value != ep.value:
            raise PluginError(
                f"two plugins claim the name '{ep.name}':"
                f" {_origin(by_name[ep.name])} and {_origin(ep)}"
            )
        by_name[ep.name] = ep
    loaded = LoadedPlugins()
    for name in enabled:
        found = by_name.get(name)
        if found is None:
            loaded.errors.append(
                f"plugin '{name}' is enabled but not installed"
                f" (entry point group {ENTRY_POINT_GROUP})"
            )
            continue
        try:
            plugin = found.load()
        except Exception as exc:  # a broken plugin must not take the others down
            loaded.errors.append(
                f"plugin '{name}' failed to import from {found.value}: {type(exc).__name__}: {exc}"
            )
            continue
        if not isinstance(plugin, Plugin):
            loaded.errors.append(f"plugin '{name}': {found.value} is not a resurrect.sdk.Plugin")
            continue
        if plugin.name != name:
            loaded.errors.append(f"plugin '{name}': its Plugin object is named '{plugin.name}'")
            continue
        loaded.plugins.append(plugin)
    for error in loaded.errors:
        log.error("%s", error)
    return loaded


def step_registry(builtin: dict[str, StepFn], plugins: Sequence[Plugin]) -> dict[str, StepFn]:
    """Activity name -> step, built-ins first; a name claimed twice fails naming both."""
    registry = dict(builtin)
    owners = {name: "resurrect (built-in)" for name in builtin}
    for plugin in plugins:
        for fn in plugin.steps:
            activity_name = step_meta(fn).name
            if not activity_name.startswith(f"{plugin.name}."):
                raise PluginError(
                    f"step '{activity_name}' ({fn.__module__}.{fn.__qualname__}) of plugin"
                    f" '{plugin.name}': a plugin's steps are named '{plugin.name}.<step>'"
                )
            if activity_name in registry:
                raise PluginError(
                    f"activity '{activity_name}' is claimed by {owners[activity_name]}"
                    f" and by plugin '{plugin.name}' ({fn.__module__}.{fn.__qualname__})"
                )
            registry[activity_name] = fn
            owners[activity_name] = f"plugin '{plugin.name}' ({fn.__module__}.{fn.__qualname__})"
    return registry


def params_registry(steps: dict[str, StepFn]) -> dict[str, type[BaseModel] | None]:
    return {name: step_meta(fn).params for name, fn in steps.items()}
