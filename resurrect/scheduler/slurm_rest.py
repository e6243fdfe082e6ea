"""The Slurm scheduler backend over ``slurmrestd`` (Slurm's REST API, ``auth/jwt``).

Reads ``/slurm/<parser>/jobs/``, ``job/<id>``, ``nodes/`` and ``node/<name>`` and parses them
with :mod:`resurrect.scheduler.slurm_json` (the same JobInfo / NodeInfo as the CLI backend,
AdminComment hold marks included). Acts with ``POST job/<id>`` (hold, release, exclusion,
AdminComment), ``POST node/<name>`` (drain, resume), ``DELETE job/<id>`` (cancel) and, where
the data parser has it (v0.0.45, Slurm 26.05), ``POST jobs/requeue`` with the ``Hold`` flag.
Older parsers (Slurm 24.11: v0.0.42) have no requeue: there ``scontrol requeuehold`` runs
with the same token (``SLURM_JWT``, so no munge), when a Slurm client is configured; else
the requeue of a running job is refused with that reason. The check-act-verify logic is
:class:`~resurrect.scheduler.verified.VerifiedScheduler`'s, as for the CLI backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from resurrect.contracts import JobInfo, NodeInfo
from resurrect.errors import (
    JobNotFound,
    NodeNotFound,
    SchedulerError,
    SchedulerRefused,
    SchedulerUnavailable,
)
from resurrect.scheduler.slurm_exec import CommandRunner
from resurrect.scheduler.slurm_json import (
    SlurmParseError,
    parse_jobs,
    parse_nodes,
    unanswered,
)
from resurrect.scheduler.slurm_rest_client import RestClient
from resurrect.scheduler.validation import validate_job_id, validate_node_name
from resurrect.scheduler.verified import VerifiedScheduler

__all__ = ["REQUEUE_PARSERS", "SlurmRest"]

# Data parsers with ``POST jobs/requeue`` (added in Slurm 26.05's v0.0.45).
REQUEUE_PARSERS = frozenset({"v0.0.45"})
Parsed = TypeVar("Parsed")


class SlurmRest(VerifiedScheduler):
    """Scheduler over one ``slurmrestd``.

    Args:
        cluster_name: resurrect's name for this cluster (workflow ids, metrics).
        client: the HTTP client (URL, token file, timeout, answer bound).
        requeue_runner: runs ``scontrol requeuehold`` where the REST API has no requeue
            (None: such a requeue is refused).
        verify_timeout: seconds a mutation waits for Slurm to show the requested state.
        poll_interval: seconds between verification polls.
    """

    def __init__(
        self,
        cluster_name: str,
        client: RestClient,
        *,
        requeue_runner: CommandRunner | None = None,
        verify_timeout: float = 20.0,
        poll_interval: float = 0.25,
    ) -> None:
        super().__init__(cluster_name, verify_timeout=verify_timeout, poll_interval=poll_interval)
        self.client = client
        self.requeue_runner = requeue_runner

    async def data_parser(self) -> str:
        """The data-parser version this backend talks (chosen at the first request)."""
        return await self.client.connect()

    # ------------------------------------------------------------------ reads
    async def _parsed(self, path: str, parse: Callable[[dict[str, Any]], Parsed]) -> Parsed:
        doc = await self.client.request("GET", path)
        if unanswered(doc):
            raise SchedulerError(f"slurmrestd GET {path}: no answer from slurmctld")
        try:
            return parse(doc)
        except SlurmParseError as exc:
            raise SchedulerError(f"cannot parse slurmrestd GET {path}: {exc}") from exc

    async def list_jobs(self) -> list[JobInfo]:
        """All jobs slurmctld knows, finished ones included until MinJobAge expires."""
        return await self._parsed("jobs/", parse_jobs)

    async def list_nodes(self) -> list[NodeInfo]:
        return await self._parsed("nodes/", parse_nodes)

    async def get_job(self, job_id: str) -> JobInfo:
        """One job, read by id."""
        jid = validate_job_id(job_id)
        try:
            jobs = await self._parsed(f"job/{jid}", parse_jobs)
        except JobNotFound:
            jobs = []
        for job in jobs:
            if job.job_id == jid:
                return job
        raise JobNotFound(f"job {jid} not known to slurmctld of {self.cluster_name}")

    async def get_node(self, name: str) -> NodeInfo:
        """One node, read by name."""
        node_name = validate_node_name(name)
        try:
            nodes = await self._parsed(f"node/{node_name}", parse_nodes)
        except SchedulerUnavailable:
            raise
        except SchedulerError:
            # an unknown node is a generic "Failure to query node" answer: look it up
            nodes = await self.list_nodes_named([node_name])
        for node in nodes:
            if node.name == node_name:
                return node
        raise NodeNotFound(f"node {node_name} not in cluster {self.cluster_name}")

    # ------------------------------------------------------------------ primitives
    async def _update_job(self, job_id: str, fields: dict[str, Any]) -> None:
        await self.client.request("POST", f"job/{job_id}", fields)

    async def _update_node(self, node: str, fields: dict[str, Any]) -> None:
        await self.client.request("POST", f"node/{node}", fields)

    async def _act_drain(self, node: str, reason: str) -> None:
        await self._update_node(node, {"state": ["DRAIN"], "reason": reason})

    async def _act_resume(self, node: str) -> None:
        await self._update_node(node, {"state": ["RESUME"]})

    async def _act_hold(self, job_id: str) -> None:
        await self._update_job(job_id, {"hold": True})

    async def _act_release(self, job_id: str) -> None:
        await self._update_job(job_id, {"hold": False})

    async def _act_exclude(self, job_id: str, nodes: list[str]) -> None:
        await self._update_job(job_id, {"excluded_nodes": nodes})

    async def _act_admin_comment(self, job_id: str, text: str) -> None:
        await self._update_job(job_id, {"admin_comment": text})

    async def _act_cancel(self, job_id: str) -> None:
        await self.client.request("DELETE", f"job/{job_id}")

    async def _act_requeuehold(self, job_id: str) -> None:
        parser = await self.data_parser()
        if parser in REQUEUE_PARSERS:
            await self.client.request("POST", "jobs/requeue", {"jobs": [job_id], "flags": ["Hold"]})
            return
        if self.requeue_runner is None:
            raise SchedulerRefused(
                f"slurmrestd data parser {parser} has no job requeue (Slurm 26.05's v0.0.45 "
                "has) and no Slurm client is configured (cluster.slurm_bin_dir) to requeue "
                f"job {job_id} with scontrol"
            )
        token = self.client.token.get()
        runner = CommandRunner(
            bin_dir=self.requeue_runner.bin_dir,
            timeout=self.requeue_runner.timeout,
            extra_env={**self.requeue_runner.env, "SLURM_JWT": token},
        )
        await runner.check(["scontrol", "requeuehold", job_id])
