"""The Slurm scheduler backend over the command-line clients (works on Slurm >= 22.05).

Reads use JSON: ``squeue --json`` and ``sinfo --json`` on 22.05 (both ignore filters there,
so filtering is client-side), ``scontrol show job|node --json`` on 23.02+. Actions use
``scontrol`` and ``scancel`` with argv lists, never a shell. The check-act-verify logic and
the requeue paths live in :mod:`resurrect.scheduler.verified`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from resurrect.contracts import JobInfo, NodeInfo
from resurrect.errors import SchedulerError, SchedulerUnavailable
from resurrect.scheduler.slurm_exec import CommandRunner, classify_text
from resurrect.scheduler.slurm_json import (
    SlurmParseError,
    embedded_errors,
    parse_jobs,
    parse_nodes,
)
from resurrect.scheduler.verified import VerifiedScheduler, drain_reason

__all__ = ["SlurmCli", "drain_reason", "parse_slurm_version"]

_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_slurm_version(text: str) -> tuple[int, int, int]:
    """``"slurm 22.05.8"`` / ``"slurm-wlm 24.11.5"`` -> ``(22, 5, 8)``."""
    m = _VERSION_RE.search(text)
    if not m:
        raise SchedulerError(f"cannot parse Slurm version from {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


class SlurmCli(VerifiedScheduler):
    """Scheduler over ``squeue``/``sinfo``/``scontrol``/``scancel``.

    Args:
        cluster_name: resurrect's name for this cluster (workflow ids, metrics).
        slurm_conf: path passed as ``SLURM_CONF`` to every command (None: inherit/default).
        bin_dir: directory of the Slurm client binaries (None: look them up on PATH).
        command_timeout: seconds one command may take; beyond it SchedulerUnavailable.
        verify_timeout: seconds a mutation waits for Slurm to show the requested state.
        poll_interval: seconds between verification polls.
    """

    def __init__(
        self,
        cluster_name: str,
        slurm_conf: str | None = None,
        bin_dir: str | None = None,
        *,
        command_timeout: float = 30.0,
        verify_timeout: float = 20.0,
        poll_interval: float = 0.25,
    ) -> None:
        super().__init__(cluster_name, verify_timeout=verify_timeout, poll_interval=poll_interval)
        self.slurm_conf = slurm_conf
        self.runner = CommandRunner(bin_dir=bin_dir, slurm_conf=slurm_conf, timeout=command_timeout)
        self._version: tuple[int, int, int] | None = None

    # ------------------------------------------------------------------ reads
    async def version(self) -> tuple[int, int, int]:
        """The Slurm client version (cached); decides which JSON commands are used."""
        if self._version is None:
            result = await self.runner.check(["scontrol", "--version"])
            self._version = parse_slurm_version(result.stdout)
        return self._version

    async def _json(self, argv: list[str]) -> dict[str, Any]:
        result = await self.runner.check(argv)
        try:
            doc = json.loads(result.stdout)
        except json.JSONDecodeError as exc:
            raise SchedulerError(f"{' '.join(argv)} returned invalid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise SchedulerError(f"{' '.join(argv)} returned a JSON {type(doc).__name__}")
        errors = embedded_errors(doc)
        if errors:
            raise await self._explain_json_errors(argv, "; ".join(errors))
        return doc

    async def _explain_json_errors(self, argv: list[str], text: str) -> SchedulerError:
        """Slurm 22.05 exits 0 with ``errors: [Unspecified error]`` when slurmctld is down;
        ask ``scontrol ping`` whether the controller answers to tell transient from not."""
        mapped = classify_text(text, f"{' '.join(argv)}: ")
        if type(mapped) is not SchedulerError:
            return mapped
        try:
            ping = await self.runner.run(["scontrol", "ping"])
        except SchedulerUnavailable as exc:
            return exc
        if ping.returncode != 0 or "DOWN" in ping.stdout:
            first = (ping.stdout.strip().splitlines() or ["no answer"])[0]
            return SchedulerUnavailable(f"{' '.join(argv)}: {text}; {first}")
        return mapped

    async def list_jobs(self) -> list[JobInfo]:
        """All jobs slurmctld knows, finished ones included until MinJobAge expires."""
        major = (await self.version())[0]
        argv = ["squeue", "--json"] if major < 23 else ["scontrol", "show", "job", "--json"]
        doc = await self._json(argv)
        try:
            return parse_jobs(doc)
        except SlurmParseError as exc:
            raise SchedulerError(f"cannot parse {' '.join(argv)}: {exc}") from exc

    async def list_nodes(self) -> list[NodeInfo]:
        major = (await self.version())[0]
        argv = ["sinfo", "--json"] if major < 23 else ["scontrol", "show", "node", "--json"]
        doc = await self._json(argv)
        try:
            return parse_nodes(doc)
        except SlurmParseError as exc:
            raise SchedulerError(f"cannot parse {' '.join(argv)}: {exc}") from exc

    # ------------------------------------------------------------------ primitives
    async def _scontrol(self, *args: str) -> None:
        await self.runner.check(["scontrol", *args])

    async def _act_drain(self, node: str, reason: str) -> None:
        await self._scontrol("update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")

    async def _act_resume(self, node: str) -> None:
        await self._scontrol("update", f"NodeName={node}", "State=RESUME")

    async def _act_hold(self, job_id: str) -> None:
        await self._scontrol("hold", job_id)

    async def _act_requeuehold(self, job_id: str) -> None:
        await self._scontrol("requeuehold", job_id)

    async def _act_exclude(self, job_id: str, nodes: list[str]) -> None:
        await self._scontrol("update", f"JobId={job_id}", f"ExcNodeList={','.join(nodes)}")

    async def _act_release(self, job_id: str) -> None:
        await self._scontrol("release", job_id)

    async def _act_admin_comment(self, job_id: str, text: str) -> None:
        await self._scontrol("update", f"JobId={job_id}", f"AdminComment={text}")

    async def _act_cancel(self, job_id: str) -> None:
        await self.runner.check(["scancel", job_id])
