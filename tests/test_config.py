from __future__ import annotations

from pathlib import Path

import pytest

from resurrect.config import load_config
from resurrect.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "resurrect.example.yaml"


def test_defaults_without_a_file() -> None:
    config = load_config(None, environ={})
    assert config.mode == "observe"
    assert config.temporal.embedded and config.temporal.ui_port == 8233
    assert not config.policy.default.enabled  # opt-in only


def test_the_shipped_example_is_valid() -> None:
    config = load_config(EXAMPLE, environ={})
    assert config.cluster.name


def test_bad_field_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("temporal:\n  ui_port: 99999\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert str(path) in str(err.value) and "temporal.ui_port" in str(err.value)


def test_unknown_field_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("watcher:\n  poll_intervl_s: 3\n")
    with pytest.raises(ConfigError, match=r"watcher\.poll_intervl_s"):
        load_config(path, environ={})


@pytest.mark.parametrize(
    "text", ["- just\n- a list\n", "mode: [unclosed\n", b"\xff\xfe\x00binary".decode("latin-1")]
)
def test_malformed_files_fail_clearly(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=str(path)):
        load_config(path, environ={})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("mode: observe\ntemporal:\n  address: a:1\n")
    config = load_config(
        path,
        environ={
            "RESURRECT_MODE": "act",
            "RESURRECT_TEMPORAL__ADDRESS": "temporal.prod:7233",
            "RESURRECT_RULES__EXTRA_PACKS": "[/etc/resurrect/site.yaml]",
            "UNRELATED": "x",
        },
    )
    assert config.mode == "act"
    assert config.temporal.address == "temporal.prod:7233"
    assert config.rules.extra_packs == [Path("/etc/resurrect/site.yaml")]


def test_bad_environment_value_is_named() -> None:
    with pytest.raises(ConfigError, match="mode"):
        load_config(None, environ={"RESURRECT_MODE": "yolo"})


def test_the_agent_section_is_validated_with_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("agent:\n  heartbeat_interval_s: 1\n  silence_threshold_s: 4\n")
    agent = load_config(path, environ={}).agent
    assert (agent.heartbeat_interval_s, agent.silence_threshold_s) == (1.0, 4.0)
    path.write_text("agent:\n  hearbeat_interval_s: 1\n")
    with pytest.raises(ConfigError, match=r"agent\.hearbeat_interval_s"):
        load_config(path, environ={})


def test_with_fencing_the_watchdog_never_releases_a_held_job_before_the_fence() -> None:
    import pytest
    from pydantic import ValidationError

    from resurrect.config import ResurrectConfig

    with pytest.raises(ValidationError, match="hold_bound_s"):
        ResurrectConfig.model_validate(
            {"fencing": {"enabled": True, "lease_s": 200}, "watchdog": {"hold_bound_s": 120}}
        )
    ResurrectConfig.model_validate({"fencing": {"enabled": True}})  # 120 s > 23.5 s
    ResurrectConfig.model_validate({"fencing": {"lease_s": 200}})  # fencing off: no wait
