"""Run a node health check program (argv, never a shell string) and read its verdict.

Exit 0 means healthy; anything else, a timeout or a program that cannot start means not
healthy, with the tail of its output as the reason. ``{node}`` in any argv element is
replaced by the node's name (checked to be a node name first). Used by the node repair
workflow's ``repair.check_node`` and by the example plugin's ``return_if_healthy`` step.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from resurrect.scheduler.validation import validate_node_name

OUTPUT_TAIL = 300


@dataclass(frozen=True)
class HealthVerdict:
    healthy: bool
    detail: str


def check_argv(template: list[str], node: str) -> list[str]:
    name = validate_node_name(node)
    return [part.replace("{node}", name) for part in template]


async def run_health_check(template: list[str], node: str, timeout_s: float) -> HealthVerdict:
    """Run the check for ``node``; its exit status is the verdict."""
    argv = check_argv(template, node)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        return HealthVerdict(False, f"health check {argv[0]!r} cannot run: {exc.strerror or exc}")
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        return HealthVerdict(False, f"health check timed out after {timeout_s:g} s")
    tail = output.decode(errors="replace").strip()[-OUTPUT_TAIL:]
    if process.returncode != 0:
        return HealthVerdict(False, f"unhealthy (exit {process.returncode}): {tail}")
    return HealthVerdict(True, f"healthy: {tail}" if tail else "healthy")
