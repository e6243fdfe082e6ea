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

The watcher's view reads a full record only for the jobs it watches. slurmrestd filters
jobs by nothing but id, and its ``update_time`` is one change time for all jobs (any change,
and a busy queue always has one, gives every job again), so: ``GET jobs/state/`` (id and
state of every job, ~80 B a job against ~9.7 KB in ``jobs/``), then ``GET job/<id>`` for the
running, suspended and failed ones (a bounded number at once); a full ``jobs/`` read only
where most jobs are in view anyway. Nodes (fleet-sized, not queue-sized) are a snapshot
renewed by ``GET nodes/?update_time=T`` (HTTP 304 while no node changed; Slurm 26.05) and
read whole at least every :data:`NODE_RESYNC_S`; named nodes are read one by one
(``GET node/<name>``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

from resurrect.contracts import JobInfo, JobState, NodeInfo
from resurrect.errors import (
    JobNotFound,
    NodeNotFound,
    SchedulerError,
    SchedulerRefused,
    SchedulerUnavailable,
)
from resurrect.job_notes import JobNotes
from resurrect.scheduler.base import active_only, census_of, watched_state
from resurrect.scheduler.slurm_exec import CommandRunner
from resurrect.scheduler.slurm_json import (
    SlurmParseError,
    number,
    parse_job_state,
    parse_jobs,
    parse_nodes,
    unanswered,
    why_unreadable,
)
from resurrect.scheduler.slurm_rest_client import RestClient
from resurrect.scheduler.validation import validate_job_id, validate_node_name
from resurrect.scheduler.verified import VerifiedScheduler

__all__ = [
    "DETAIL_READS_AT_ONCE",
    "FULL_READ_SHARE",
    "NAMED_NODE_READS",
    "NODE_CHANGES_PARSERS",
    "NODE_RESYNC_S",
    "REQUEUE_PARSERS",
    "SlurmRest",
    "parse_job_states",
]

log = logging.getLogger(__name__)
_UNREADABLE = JobNotes(log)

# Data parsers with ``POST jobs/requeue`` (added in Slurm 26.05's v0.0.45).
REQUEUE_PARSERS = frozenset({"v0.0.45"})
# Data parsers whose slurmrestd answers ``GET nodes/?update_time=T`` with HTTP 304 when no
# node changed (26.05). 24.11's (v0.0.42) answers HTTP 500 "Unable to query partitions"
# then: there every node view is a full ``nodes/`` read.
NODE_CHANGES_PARSERS = frozenset({"v0.0.45"})
# ``GET job/<id>`` reads of the watcher's view in flight at once.
DETAIL_READS_AT_ONCE = 8
# One full ``jobs/`` read replaces the per-job reads when more than this many jobs are in
# view and they are more than 1/FULL_READ_SHARE of all jobs (a full read costs ~9 KB a job).
FULL_READ_MIN = 64
FULL_READ_SHARE = 4
# Up to this many named nodes are read one by one; more come from the node snapshot.
NAMED_NODE_READS = 16
# The node snapshot is read whole at least this often, whatever ``update_time`` says.
NODE_RESYNC_S = 60.0
Parsed = TypeVar("Parsed")


def parse_job_states(doc: dict[str, Any]) -> list[tuple[str, JobState]]:
    """(job id, state) of each job of a ``GET jobs/state/`` answer, the id as slurmrestd
    wrote it (array tasks: ``12_3``; checked where it is used); an entry without an id is
    left out (noted)."""
    entries = doc.get("jobs")
    if not isinstance(entries, list):
        raise SlurmParseError("no 'jobs' list in slurmrestd jobs/state/ answer")
    states: list[tuple[str, JobState]] = []
    known: dict[Any, JobState] = {}  # a queue has few distinct state lists: each parsed once
    for entry in entries:
        raw_id = entry.get("job_id") if isinstance(entry, dict) else None
        if not isinstance(raw_id, str | int) or isinstance(raw_id, bool):
            _UNREADABLE.note(str(raw_id)[:40], "jobs/state/ entry without a job id left out")
            continue
        try:
            states.append((str(raw_id), _entry_state(entry.get("state"), known)))
        except Exception as exc:  # that entry's data: it costs that entry alone
            _UNREADABLE.note(str(raw_id)[:40], f"jobs/state/ entry left out: {why_unreadable(exc)}")
    return states


def _entry_state(raw: Any, known: dict[Any, JobState]) -> JobState:
    """The base state of one ``jobs/state/`` entry's state list, parsed once per list."""
    key = tuple(raw) if isinstance(raw, list) else raw
    try:
        state = known.get(key)
    except TypeError:  # unhashable parts: parsed, not remembered
        key, state = None, None
    if state is None:
        state = parse_job_state(raw)[0]
        if key is not None:
            known[key] = state
    return state


def _valid_job_ids(job_ids: Iterable[str]) -> list[str]:
    """``job_ids`` that are Slurm job ids; any other is left out (noted)."""
    valid: list[str] = []
    for job_id in job_ids:
        try:
            valid.append(validate_job_id(job_id))
        except SchedulerError:
            _UNREADABLE.note(job_id[:40], "jobs/state/ entry with an invalid job id left out")
    return valid


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
        # the node snapshot: slurmctld's time of it, when it was read whole, the nodes
        self._nodes: tuple[int, float, list[NodeInfo]] | None = None

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
            nodes = await self._node_view()
        for node in nodes:
            if node.name == node_name:
                return node
        raise NodeNotFound(f"node {node_name} not in cluster {self.cluster_name}")

    # ------------------------------------------------------------------ the watcher's view
    async def list_active_jobs(self, also: Collection[str] = ()) -> list[JobInfo]:
        """Running, suspended and recently failed jobs, and the jobs ``also`` names: the
        states of all jobs (``jobs/state/``), then those jobs read one by one."""
        wanted = sorted({validate_job_id(job_id) for job_id in also})
        states = await self._parsed("jobs/state/", parse_job_states)
        watched = _valid_job_ids(job_id for job_id, state in states if watched_state(state))
        in_view = set(watched)
        to_read = watched + [job_id for job_id in wanted if job_id not in in_view]
        if len(to_read) > FULL_READ_MIN and len(to_read) * FULL_READ_SHARE > len(states):
            return active_only(await self.list_jobs(), also)
        gate = asyncio.Semaphore(DETAIL_READS_AT_ONCE)

        async def read(job_id: str) -> list[JobInfo]:
            """One job's record; a record that cannot be read is that job's alone: left
            out (noted). Only an unreachable slurmrestd or slurmctld fails the view."""
            async with gate:
                try:
                    return await self._parsed(f"job/{job_id}", parse_jobs)
                except JobNotFound:
                    return []  # ended and forgotten between the two reads
                except SchedulerUnavailable:
                    raise
                except Exception as exc:
                    _UNREADABLE.note(job_id, f"job record left out: {why_unreadable(exc)}")
                    return []

        read_jobs = await asyncio.gather(*(read(job_id) for job_id in to_read))
        return active_only(_unique(job for jobs in read_jobs for job in jobs), also)

    async def list_unhealthy_nodes(self) -> list[NodeInfo]:
        """Nodes that are down, failed, not responding, unknown or future."""
        return [node for node in await self._node_view() if node.unavailable]

    async def list_nodes_named(self, names: Collection[str]) -> list[NodeInfo]:
        """The nodes of ``names`` that exist: read one by one (``node/<name>``), or from
        the node snapshot when there are more than NAMED_NODE_READS."""
        wanted = {validate_node_name(name) for name in names}
        if len(wanted) > NAMED_NODE_READS:
            return [node for node in await self._node_view() if node.name in wanted]
        found: list[NodeInfo] = []
        for name in sorted(wanted):
            try:
                found.append(await self.get_node(name))
            except NodeNotFound:
                continue
        return found

    async def drain_census(self) -> tuple[int, list[NodeInfo]]:
        """How many nodes the cluster has, and the drained (or draining) ones."""
        return census_of(await self._node_view())

    async def _node_view(self) -> list[NodeInfo]:
        """Every node: the snapshot while slurmctld says no node changed since it was
        taken (``nodes/?update_time=T``: HTTP 304; NODE_CHANGES_PARSERS), else (and at
        least every NODE_RESYNC_S) read whole."""
        path = "nodes/"
        snapshot = self._nodes
        fresh = snapshot is not None and time.monotonic() - snapshot[1] < NODE_RESYNC_S
        if snapshot is not None and fresh and await self.data_parser() in NODE_CHANGES_PARSERS:
            doc = await self.client.request_changed(path, since=snapshot[0])
            if doc is None:
                return snapshot[2]
        else:
            doc = await self.client.request("GET", path)
        try:
            nodes = parse_nodes(doc)
        except SlurmParseError as exc:
            raise SchedulerError(f"cannot parse slurmrestd GET {path}: {exc}") from exc
        stamp = number(doc.get("last_update"))
        self._nodes = (stamp, time.monotonic(), nodes) if stamp else None
        return nodes

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
        try:
            await runner.check(["scontrol", "requeuehold", job_id])
        except SchedulerError as exc:
            raise self.client.redacted(exc) from None


def _unique(jobs: Iterable[JobInfo]) -> list[JobInfo]:
    """``jobs`` with each job id once (the first)."""
    seen: dict[str, JobInfo] = {}
    for job in jobs:
        seen.setdefault(job.job_id, job)
    return list(seen.values())
