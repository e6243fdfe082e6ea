"""Running Slurm client commands: argv only, asyncio subprocesses, timeouts, error mapping.

Every command is an argv list executed without a shell. Its stderr/stdout text is mapped to
resurrect's error tree so callers can tell transient (controller unreachable) from permanent
(no such job, operation refused) failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from resurrect.errors import (
    JobAlreadyPending,
    JobCompleting,
    JobNotFound,
    NodeNotFound,
    SchedulerError,
    SchedulerRefused,
    SchedulerUnavailable,
)
from resurrect.telemetry.record import record_command

# Text (lower-cased) that means the controller could not be reached: retrying may help.
_UNAVAILABLE = (
    "unable to contact slurm controller",
    "connect failure",
    "connection refused",
    "socket timed out",
    "zero bytes were transmitted",
    "communication connection failure",
    "transport endpoint is not connected",
    "slurm backup controller in standby mode",
    "resource temporarily unavailable",
    "munge",
    "unable to establish controller machine",
    "slurmctld is not responding",
)
_JOB_NOT_FOUND = ("invalid job id specified", "job id not found")
_NODE_NOT_FOUND = ("invalid node name specified",)
_NODE_NOT_FOUND_RE = re.compile(r"node \S+ not found", re.IGNORECASE)
_JOB_PENDING = ("job is pending execution",)
_JOB_COMPLETING = ("job is still completing", "already completing or completed")
_REFUSED = (
    "requested operation is presently disabled",
    "job has already finished",
    "job is no longer pending execution",
    "access/permission denied",
    "permission denied",
    "operation not permitted",
    "requested operation not supported",
    "invalid node state specified",
)


@dataclass(frozen=True)
class CommandResult:
    """What a finished command returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        """stderr and stdout together (Slurm prints errors on either)."""
        return f"{self.stderr}\n{self.stdout}".strip()


def classify_failure(result: CommandResult) -> SchedulerError:
    """The resurrect error for a failed Slurm command, chosen from its output text."""
    text = result.text
    return classify_text(text, f"{' '.join(result.argv[:3])}: rc={result.returncode}: ")


def classify_text(text: str, context: str = "") -> SchedulerError:
    """Map a Slurm error message (CLI output, pyslurm RPCError text) to the error tree."""
    low = text.lower()
    summary = f"{context}{_first_lines(text)}"
    if any(p in low for p in _JOB_NOT_FOUND):
        return JobNotFound(summary)
    if any(p in low for p in _NODE_NOT_FOUND) or _NODE_NOT_FOUND_RE.search(text):
        return NodeNotFound(summary)
    if any(p in low for p in _JOB_PENDING):
        return JobAlreadyPending(summary)
    if any(p in low for p in _JOB_COMPLETING):
        return JobCompleting(summary)
    if any(p in low for p in _REFUSED):
        return SchedulerRefused(summary)
    if any(p in low for p in _UNAVAILABLE):
        return SchedulerUnavailable(summary)
    return SchedulerError(summary)


def _first_lines(text: str, limit: int = 400) -> str:
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat[:limit]


class CommandRunner:
    """Runs Slurm client binaries from ``bin_dir`` with a fixed environment."""

    def __init__(
        self,
        *,
        bin_dir: str | None = None,
        slurm_conf: str | None = None,
        timeout: float = 30.0,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.bin_dir = bin_dir
        self.timeout = timeout
        env = dict(os.environ)
        # job-context variables would make the client commands act on "this" job
        for key in list(env):
            if key.startswith(("SLURM_JOB", "SLURM_STEP", "SQUEUE_", "SINFO_", "SBATCH_")):
                del env[key]
        if slurm_conf is not None:
            env["SLURM_CONF"] = slurm_conf
        env["LC_ALL"] = "C"
        env.update(extra_env or {})
        self.env = env

    def resolve(self, program: str) -> str:
        """Absolute path of ``program`` under ``bin_dir`` (or the bare name for PATH lookup)."""
        return os.path.join(self.bin_dir, program) if self.bin_dir else program

    async def run(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        """Run ``argv`` (``argv[0]`` a program name); never raises for a non-zero exit.

        Raises SchedulerUnavailable on timeout, SchedulerError if the program is missing.
        """
        if isinstance(argv, str) or not argv:
            raise TypeError("argv must be a non-empty sequence of strings")
        full = (self.resolve(argv[0]), *argv[1:])
        limit = self.timeout if timeout is None else timeout
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *full,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                start_new_session=True,  # own process group: a timeout kills all of it
            )
        except FileNotFoundError as exc:
            raise SchedulerError(f"Slurm client {full[0]!r} not found") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=limit)
        except TimeoutError as exc:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), timeout=5)
            raise SchedulerUnavailable(f"{' '.join(full[:3])}: timed out after {limit}s") from exc
        record_command(argv[0], time.monotonic() - started, len(out) + len(err))
        return CommandResult(
            argv=tuple(full),
            returncode=proc.returncode if proc.returncode is not None else -1,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
        )

    async def check(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        """Run ``argv``; a non-zero exit raises the mapped SchedulerError."""
        result = await self.run(argv, timeout=timeout)
        if result.returncode != 0:
            raise classify_failure(result)
        return result
