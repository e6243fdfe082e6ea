"""``recovery.run_program``: a step that runs an external program, so non-Python remedies
(a BMC reset script, an NVMe scrub, a ticket CLI) can join a recovery plan.

The program is an argv list, never a shell string. Placeholders, replaced inside argv
elements, are ``{job_id}``, ``{incident}``, ``{fault_class}``, ``{nodes}`` (comma-separated)
and ``{node}`` (with ``per_node: true`` the program runs once per implicated node). Values
come from the scheduler, not from log text, and are checked against a safe character set.

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
PLACEHOLDERS = ("{job_id}", "{incident}", "{fault_class}", "{nodes}", "{node}")


class RunProgramParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    per_node: bool = False
    env: dict[str, str] = Field(default_factory=dict)
    output_limit: int = Field(default=4096, ge=0, le=1 << 20)


def _substitute(argv: list[str], values: dict[str, str]) -> list[str]:
    out = []
    for element in argv:
        for key, value in values.items():
            element = element.replace(key, value)
        out.append(element)
    return out


async def _run_once(argv: list[str], params: RunProgramParams) -> tuple[int | None, str]:
    env = {**os.environ, **params.env}
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


@step("recovery.run_program")
async def run_program(ctx: StepContext, params: RunProgramParams) -> StepResult:
    """Run an external program (argv list); exit 0 ok, 1 failed, else unknown (retried)."""
    nodes = list(ctx.plan.drain_nodes or ctx.job.nodes)
    values = {
        "{job_id}": ctx.job.job_id,
        "{incident}": ctx.incident_id,
        "{fault_class}": ctx.diagnosis.fault_class.value,
        "{nodes}": ",".join(nodes),
    }
    for key, value in values.items():
        if not SAFE_VALUE.match(value):
            raise PermanentStepError(f"refusing to pass unsafe value for {key}: {value!r}")
    targets: list[str | None] = list(nodes) if params.per_node else [None]
    result = StepResult()
    for node in targets:
        node_values = dict(values)
        if node is not None:
            if not SAFE_VALUE.match(node):
                raise PermanentStepError(f"refusing to pass unsafe node name {node!r}")
            node_values["{node}"] = node
        argv = _substitute(params.argv, node_values)
        ctx.heartbeat(f"running {argv[0]}")
        code, output = await _run_once(argv, params)
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
