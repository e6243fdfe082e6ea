"""Attack 15: ``recovery.run_program`` aimed at every node of the job, with the worker's secrets.

A plan step such as ``run_program: [reset-gpu, {node}], per_node: true`` used to run on every
node of the job when the recovery drained nothing (a log-only diagnosis, a spent
blast-radius budget), and the program inherited the worker's whole environment (Temporal
API keys, cloud credentials).
"""

from __future__ import annotations

import json
import sys

import pytest

from resurrect.activities.external_program import run_program
from resurrect.contracts import RecoveryState
from resurrect.testing.steps import make_step_input, run_step

DUMP_ENV = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
PRINT_NODE = [sys.executable, "-c", "import sys; print('ran on', sys.argv[1])", "{node}"]


def _env_seen(result_data: dict[str, dict[str, object]]) -> dict[str, str]:
    [entry] = result_data.values()
    seen: dict[str, str] = json.loads(str(entry["output"]))
    return seen


async def test_per_node_program_never_runs_on_nodes_nothing_drained() -> None:
    # the attack: the plan drained nothing (culprit unconfirmed), the job ran on two nodes
    step_input = make_step_input(
        "recovery.run_program",
        {"argv": PRINT_NODE, "per_node": True},
        state=RecoveryState(drained_nodes=[]),
    )
    result = await run_step(run_program, step_input=step_input)
    assert result.ok
    assert result.data == {}, "the program ran although this recovery drained no node"
    assert "not run" in result.detail


async def test_per_node_program_runs_only_on_the_nodes_this_recovery_drained() -> None:
    step_input = make_step_input(
        "recovery.run_program",
        {"argv": PRINT_NODE, "per_node": True},
        state=RecoveryState(drained_nodes=["node2"]),
    )
    result = await run_step(run_program, step_input=step_input)
    outputs = [str(entry["output"]).strip() for entry in result.data.values()]
    assert outputs == ["ran on node2"]


async def test_an_explicit_node_list_is_honoured() -> None:
    step_input = make_step_input(
        "recovery.run_program",
        {"argv": PRINT_NODE, "per_node": True, "nodes": ["node3"]},
        state=RecoveryState(drained_nodes=["node2"]),
    )
    result = await run_step(run_program, step_input=step_input)
    outputs = [str(entry["output"]).strip() for entry in result.data.values()]
    assert outputs == ["ran on node3"]


async def test_the_worker_environment_does_not_reach_the_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESURRECT_TEMPORAL__API_KEY", "tk-secret-api-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    step_input = make_step_input(
        "recovery.run_program",
        {"argv": DUMP_ENV, "env": {"TICKET_QUEUE": "gpu-ops"}},
        state=RecoveryState(drained_nodes=["node2"]),
    )
    result = await run_step(run_program, step_input=step_input)
    seen = _env_seen(result.data)
    assert "tk-secret-api-key" not in json.dumps(seen)
    assert "aws-secret" not in json.dumps(seen)
    assert "AWS_SECRET_ACCESS_KEY" not in seen and "RESURRECT_TEMPORAL__API_KEY" not in seen
    # what it does get: a PATH, LANG, the documented RESURRECT_* variables, the plan's env
    assert seen["PATH"] and seen["LANG"] == "C.UTF-8"
    assert seen["RESURRECT_JOB_ID"] == "42"
    assert seen["RESURRECT_NODES"] == "node2"
    assert seen["RESURRECT_FAULT_CLASS"] == "gpu.hardware"
    assert seen["RESURRECT_WORKFLOW_ID"] == "recover/test/42/0"
    assert seen["TICKET_QUEUE"] == "gpu-ops"
    allowed = {"PATH", "LANG", "TICKET_QUEUE", "LC_CTYPE", "PWD", "SHLVL", "_"}
    extra = {k for k in seen if not k.startswith("RESURRECT_")} - allowed
    # the interpreter may add LC_CTYPE (PEP 538); nothing of the worker's own
    assert not extra, extra
