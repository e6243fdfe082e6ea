"""The demo's scenarios: one per ``--scenario`` name, each setting up for its own fault.

What a scenario then does on the real cluster is tested live in tests/e2e/test_demo_*.py.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path
from types import ModuleType

import pytest

from resurrect.demo.scenario import SCENARIOS, Demo, DemoError, DemoSettings
from resurrect.demo.scenarios.crash_loop import CrashLoop
from resurrect.demo.stage import gpu_error_hosts

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train" / "train.py"


def test_every_scenario_is_registered_under_the_name_it_runs_as() -> None:
    assert list(SCENARIOS) == [
        "node-loss", "gpu-error", "checkpoint-damage", "hang", "straggler", "crash-loop",
        "partition", "freeze",
    ]  # fmt: skip
    for name, scenario in SCENARIOS.items():
        assert scenario.name == name and scenario.summary


def test_an_unknown_scenario_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(DemoError, match="crash-loop"):
        Demo(DemoSettings(scenario="meteor-strike"), print)


def test_crash_loop_fails_every_attempt_and_lowers_k_only_when_asked() -> None:
    crash_loop = CrashLoop()
    default = DemoSettings(scenario="crash-loop")
    assert crash_loop.comment(default) == {}  # the policy's own K (3)
    assert crash_loop.cluster_nodes(default) == 5  # rank 0's node + one per attempt
    short = DemoSettings(scenario="crash-loop", no_progress_restarts=2)
    assert crash_loop.comment(short) == {"no_progress_restarts": 2}
    assert crash_loop.cluster_nodes(short) == short.nodes == 4
    env = crash_loop.job_env(short)
    assert env["RESURRECT_TRAIN_FAIL_GPU_EVERY_ATTEMPT"] == "1"
    assert env["RESURRECT_TRAIN_FAIL_GPU_AT_STEP"] == str(short.fault_after_step)
    assert env["RESURRECT_TRAIN_LOG_EVERY"] == "1"  # the step it died at is its last step
    assert crash_loop.checkpoint_before_fault(short) is None  # the job fails by itself


def test_the_single_fault_scenarios_keep_their_setup() -> None:
    settings = DemoSettings()
    assert SCENARIOS["straggler"].operator_policy(settings) == {
        "progress": {"straggler_duration_s": 15, "straggler_action": "restart"}
    }
    assert SCENARIOS["straggler"].train_steps(settings) == 4000
    assert SCENARIOS["node-loss"].checkpoint_before_fault(settings) == 40
    assert SCENARIOS["gpu-error"].node_agents and not SCENARIOS["hang"].node_agents
    # the faults of whole hosts play on hosts in namespaces, with an agent on each
    assert [n for n, sc in SCENARIOS.items() if sc.hosts == "netns"] == ["partition", "freeze"]
    assert SCENARIOS["partition"].node_agents and SCENARIOS["freeze"].node_agents
    assert "RESURRECT_TRAIN_FAIL_GPU_EVERY_ATTEMPT" not in SCENARIOS["gpu-error"].job_env(settings)


def _train_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_train", TRAIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Hung(Exception):
    """Raised where the failed rank would hang."""


@pytest.mark.torch
def test_the_demo_reads_the_host_from_the_gpu_error_the_example_job_prints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    train = _train_module()
    monkeypatch.setenv("SLURMD_NODENAME", "node3")

    def hang(seconds: float) -> None:
        raise _Hung

    monkeypatch.setattr(train.time, "sleep", hang)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(_Hung):
        train.fail_like_a_lost_gpu()
    output = b"[rank1] step 45/120 loss 0.1 t=x\n" + printed.getvalue().encode()
    assert gpu_error_hosts(output * 2) == ["node3", "node3"]
    assert gpu_error_hosts(b"node3:1:1 [0] NCCL WARN some other failure\n") == []


def test_a_scenario_succeeds_when_resurrect_did_what_it_expects() -> None:
    finished = {"recovered": True, "job_completed": True}
    cancelled = {"recovered": True, "job_completed": False}  # the demo ends a straggler's job
    assert SCENARIOS["node-loss"].succeeded(finished)
    assert not SCENARIOS["node-loss"].succeeded(cancelled)
    assert SCENARIOS["straggler"].succeeded(cancelled)
    stopped = {"loop_stopped": True, "restarts": 2, "no_progress_restarts": 2}
    assert SCENARIOS["crash-loop"].succeeded(stopped)
    assert not SCENARIOS["crash-loop"].succeeded({**stopped, "restarts": 3})
    assert not SCENARIOS["crash-loop"].succeeded({**stopped, "loop_stopped": False})
