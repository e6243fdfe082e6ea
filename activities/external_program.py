"""``recovery.run_program``: a step that runs an external program, so non-Python remedies
(a BMC reset script, an NVMe scrub, a ticket CLI) can join a recovery plan.

The program is an argv list, never a shell string. Placeholders, replaced inside argv
elements, are ``{job_id}``, ``{workflow_id}``, ``{fault_class}``, ``{nodes}`` (the target nodes,
comma-separated), ``{node}`` (with ``per_node: true`` the program runs once per target node)
and ``{job_nodes}`` (every node of the job, for information). Values come from the
scheduler, not from log text, and are checked against a safe character set.

Target nodes are the nodes this recovery drained, or the plan's explicit ``nodes`` list;
never "every node of the job": a remedy such as a GPU reset aimed at healthy nodes would
hurt whoever runs there next. With ``per_node`` and no target the program does not run.

The program does not inherit the worker's environment (which may hold API keys or Temporal
credentials): it gets ``PATH``, ``LANG``, ``SLURM_CONF`` when configured, the
``RESURRECT_*`` variables below, and what the plan's ``env`` sets explicitly::

    RESURRECT_CLUSTER RESURRECT_JOB_ID RESURRECT_WORKFLOW_ID RESURRECT_FAULT_CLASS
    RESURRECT_NODES RESURRECT_NODE (per_node only) RESURRECT_OBSERVE=0

Exit code 0 = ok; 1 = failed (the plan's ``on_failure`` applies); anything else, a timeout
or a signal = unknown (retried per the plan's retry policy). stdout and stderr are captured
and truncated to ``output_limit`` bytes.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal

from pydantic import BaseModel, ConfigDict, Field

from resurrect.contracts import StepResult
from resurrect.errors import PermanentStepError, TransientStepError
from resurrect.steps.runtime import StepContext, step

SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,:/@+=-]*$")
# What the program sees of the worker's own environment; nothing else is passed on.
INHERITED_ENV = ("PATH", "LANG")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class RunProgramParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    per_node: bool = False
    # Explicit target nodes (default: the nodes this recovery drained).
    nodes: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    output_limit: int = Field(default=4096, ge=0, le=1 << 20)


def _substitute(argv: list[str], values: dict[str, str]) -> list[str]:
    out = []
    for element in argv:
        for key, value in values.items():
            element = element.replace(key, value)
        out.append(element)
    return out


def program_environment(
    params: RunProgramParams, resurrect_vars: dict[str, str], slurm_conf: str | None
) -> dict[str, str]:
    """The program's whole environment: a minimal base, never the worker's own secrets."""
    env = {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}
    env.setdefault("PATH", DEFAULT_PATH)
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    env.update(resurrect_vars)
    env.update(params.env)
    return env


async def _run_once(
    argv: list[str], params: RunProgramParams, env: dict[str, str]
) -> tuple[int | None, str]:
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        raise PermanentStepError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout=params.timeout_s)
    except TimeoutError:
        os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        return None, f"timed out after {params.timeout_s:.0f} s"
    text = output[: params.output_limit].decode("utf-8", "replace")
    if len(output) > params.output_limit:
        text += f"... [{len(output) - params.output_limit} more bytes]"
    return process.returncode, text


def _checked(key: str, value: str) -> str:
    if not SAFE_VALUE.match(value):
        raise PermanentStepError(f"refusing to pass unsafe value for {key}: {value!r}")
    return value


@step("recovery.run_program")
async def run_program(ctx: StepContext, params: RunProgramParams) -> StepResult:
    """Run an external program (argv list); exit 0 ok, 1 failed, else unknown (retried)."""
    targets = list(params.nodes if params.nodes is not None else ctx.state.drained_nodes)
    values = {
        "{job_id}": ctx.job.job_id,
        "{workflow_id}": ctx.workflow_id,
        "{fault_class}": ctx.diagnosis.fault_class.value,
        "{nodes}": ",".join(targets),
        "{job_nodes}": ",".join(ctx.job.nodes),
    }
    for key, value in values.items():
        _checked(key, value)
    base_vars = {
        "RESURRECT_CLUSTER": ctx.input.bundle.interruption.cluster,
        "RESURRECT_JOB_ID": values["{job_id}"],
        "RESURRECT_WORKFLOW_ID": values["{workflow_id}"],
        "RESURRECT_FAULT_CLASS": values["{fault_class}"],
        "RESURRECT_NODES": values["{nodes}"],
        "RESURRECT_OBSERVE": "0",
    }
    slurm_conf = str(ctx.config.cluster.slurm_conf) if ctx.config.cluster.slurm_conf else None
    if params.per_node and not targets:
        return StepResult(
            detail="no node drained by this recovery and no explicit nodes: program not run",
            notes=[f"{params.argv[0]}: not run (per_node, and this recovery drained no node)"],
        )
    result = StepResult()
    for node in targets if params.per_node else [None]:
        node_values = dict(values)
        run_vars = dict(base_vars)
        if node is not None:
            node_values["{node}"] = _checked("{node}", node)
            run_vars["RESURRECT_NODE"] = node
        argv = _substitute(params.argv, node_values)
        ctx.heartbeat(f"running {argv[0]}")
        env = program_environment(params, run_vars, slurm_conf)
        code, output = await _run_once(argv, params, env)
        label = f"{argv[0]}" + (f" [{node}]" if node else "")
        result.data[label] = {"exit_code": code, "output": output}
        if code == 0:
            result.notes.append(f"{label}: ok")
        elif code == 1:
            result.ok = False
            result.notes.append(f"{label}: failed: {output.strip()[-500:]}")
        else:
            raise TransientStepError(
                f"{label}: unknown result (exit {code}): {output.strip()[-500:]}"
            )
    result.detail = "; ".join(result.notes)
    return result
