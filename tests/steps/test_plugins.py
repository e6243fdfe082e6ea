from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from resurrect.activities.steps import builtin_steps
from resurrect.errors import PluginError
from resurrect.steps.plugins import ENTRY_POINT_GROUP, discover, step_registry


def ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def test_only_enabled_plugins_load() -> None:
    available = [
        ep("testkit", "support.test_plugins:PLUGIN"),
        ep("other", "support.test_plugins:OTHER"),
    ]
    loaded = discover(["testkit"], available)
    assert [p.name for p in loaded.plugins] == ["testkit"] and loaded.errors == []
    assert discover([], available).plugins == []


def test_broken_plugin_is_named_and_others_still_load() -> None:
    available = [
        ep("testkit", "support.test_plugins:PLUGIN"),
        ep("broken", "support.no_such_module:PLUGIN"),
        ep("wrongtype", "support.test_plugins:NOT_A_PLUGIN"),
    ]
    loaded = discover(["broken", "testkit", "wrongtype", "missing"], available)
    assert [p.name for p in loaded.plugins] == ["testkit"]
    assert any(
        "plugin 'broken' failed to import" in e and "no_such_module" in e for e in loaded.errors
    )
    assert any(
        "plugin 'wrongtype'" in e and "not a resurrect.sdk.Plugin" in e for e in loaded.errors
    )
    assert any("plugin 'missing' is enabled but not installed" in e for e in loaded.errors)


def test_two_plugins_claiming_one_name_fail_with_both_named() -> None:
    available = [
        ep("testkit", "support.test_plugins:PLUGIN"),
        ep("testkit", "elsewhere.module:PLUGIN"),
    ]
    with pytest.raises(PluginError) as err:
        discover(["testkit"], available)
    assert "support.test_plugins:PLUGIN" in str(err.value) and "elsewhere.module:PLUGIN" in str(
        err.value
    )


def test_activity_names_are_namespaced_and_conflicts_named() -> None:
    from support.test_plugins import OTHER, PLUGIN

    registry = step_registry(builtin_steps(), [PLUGIN, OTHER])
    assert {"testkit.flaky", "testkit.mutate", "other.mutate", "recovery.drain_nodes"} <= set(
        registry
    )
    from resurrect.sdk import Plugin

    clash = Plugin(name="testkit", steps=[PLUGIN.steps[0]])
    with pytest.raises(PluginError) as err:
        step_registry(builtin_steps(), [PLUGIN, clash])
    assert "testkit.flaky" in str(err.value) and "claimed by plugin 'testkit'" in str(err.value)


def test_a_plugin_step_outside_the_plugins_namespace_is_refused() -> None:
    from support.test_plugins import PLUGIN

    from resurrect.sdk import Plugin

    stray = Plugin(name="other", steps=[PLUGIN.steps[0]])
    with pytest.raises(PluginError, match=r"'testkit\.flaky'.*plugin 'other'"):
        step_registry(builtin_steps(), [stray])
