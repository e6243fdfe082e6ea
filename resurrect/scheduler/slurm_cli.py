"""The Slurm scheduler backend over the command-line clients (works on Slurm >= 22.05).

Full reads use JSON: ``squeue --json`` and ``sinfo --json`` on 22.05 (both ignore filters
there, so filtering is client-side), ``scontrol show job|node --json`` on 23.02+, asking for
the data parser resurrect's JSON reading was written for (:data:`DATA_PARSER`) on the
releases that have it (:func:`json_option`). Reads whose
cost must not grow with the queue (the watcher's view, one job, one node) use the compact,
filtered forms of :mod:`resurrect.scheduler.slurm_compact`. Actions use
``scontrol`` and ``scancel`` with argv lists, never a shell. The check-act-verify logic and
the requeue paths live in :mod:`resurrect.scheduler.verified`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from resurrect.contracts import JobInfo, NodeInfo
from resurrect.contracts.scheduler import LAUNCH_FAILED_HELD_REASONS
from resurrect.errors import JobNotFound, NodeNotFound, SchedulerError, SchedulerUnavailable
from resurrect.numbers import is_ascii_digits
from resurrect.scheduler import slurm_compact as compact
from resurrect.scheduler.slurm_exec import CommandRunner, classify_text
from resurrect.scheduler.slurm_json import (
    JsonObj,
    SlurmParseError,
    StepdNaming,
    array_ids,
    client_expanded_paths_unreliable,
    embedded_errors,
    number,
    parse_job,
    parse_jobs,
    parse_nodes,
    stepd_naming,
    unanswered,
    why_unreadable,
)
from resurrect.scheduler.validation import validate_job_id, validate_node_name
from resurrect.scheduler.verified import VerifiedScheduler

__all__ = ["DATA_PARSER", "SlurmCli", "json_option", "parse_slurm_version"]

# More jobs than this without known owner fields (a watcher's first poll on a busy cluster)
# are read with one full JSON read instead of a few commands each.
BULK_OWNER_READ = 32
Parsed = TypeVar("Parsed")
# Jobs whose owner fields are read at the same time (each a few squeue calls on 22.05).
OWNER_READS_AT_ONCE = 4
OwnerFields = dict[str, Any]

_VERSION_RE = re.compile(r"([0-9]+)\.([0-9]+)(?:\.([0-9]+))?")

# The data parser (JSON shape) resurrect.scheduler.slurm_json was written and checked for, and
# the first and last releases known to have it (each release adds one and drops the oldest:
# 24.11 has v0.0.40-42, 26.05 v0.0.42-45). Outside them ``--json`` prints the release's own
# shape (22.05's v0.0.38 data, 23.x's v0.0.39/40, or a newer default), read the same way.
DATA_PARSER = "v0.0.42"
DATA_PARSER_RELEASES = ((24, 11), (26, 5))


def json_option(version: tuple[int, int, int]) -> str:
    """The ``--json`` option for the ``scontrol`` of ``version``: ``--json=v0.0.42`` where
    that release has the data parser, plain ``--json`` elsewhere."""
    first, last = DATA_PARSER_RELEASES
    return f"--json={DATA_PARSER}" if first <= version[:2] <= last else "--json"


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
        self._naming: StepdNaming = stepd_naming(None)
        # owner-written fields per (job id, restart count), for the jobs in the active view
        self._owner_fields: dict[tuple[str, int], OwnerFields] = {}
        # the active view's last lines and what they gave, by job id
        self._view: dict[str, tuple[str, JobInfo]] = {}

    # ------------------------------------------------------------------ reads
    async def version(self) -> tuple[int, int, int]:
        """The Slurm client version (cached); decides which JSON commands are used."""
        if self._version is None:
            result = await self.runner.check(["scontrol", "--version"])
            self._version = parse_slurm_version(result.stdout)
            self._naming = stepd_naming(self._version)
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
        if unanswered(doc):
            raise await self._explain_json_errors(argv, "no answer from slurmctld (last_update 0)")
        return doc

    async def _explain_json_errors(self, argv: list[str], text: str) -> SchedulerError:
        """Slurm 22.05 exits 0 with ``errors: [Unspecified error]`` when slurmctld is down,
        24.11 and 26.05 with no jobs and ``last_update`` 0; ask ``scontrol ping`` whether
        the controller answers to tell transient from not."""
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

    async def _show_json(self, kind: str, *ids: str) -> list[str]:
        """``scontrol show job|node --json[=DATA_PARSER] [ID]`` for this Slurm (23.02+)."""
        return ["scontrol", "show", kind, json_option(await self.version()), *ids]

    async def _parsed_json(
        self,
        before_23: list[str],
        kind: str,
        parse: Callable[[dict[str, Any]], Parsed],
    ) -> Parsed:
        """What ``parse`` reads from the JSON of ``before_23`` (Slurm 22) or of
        ``scontrol show KIND --json`` (23.02+)."""
        major = (await self.version())[0]
        argv = before_23 if major < 23 else await self._show_json(kind)
        doc = await self._json(argv)
        if major >= 23 and kind == "job":
            await self._read_output_patterns(doc.get("jobs"))
        try:
            return parse(doc)
        except SlurmParseError as exc:
            raise SchedulerError(f"cannot parse {' '.join(argv)}: {exc}") from exc

    async def list_jobs(self) -> list[JobInfo]:
        """All jobs slurmctld knows, finished ones included until MinJobAge expires."""
        return await self._parsed_json(
            ["squeue", "--json"], "job", lambda doc: parse_jobs(doc, self._naming)
        )

    async def list_nodes(self) -> list[NodeInfo]:
        return await self._parsed_json(["sinfo", "--json"], "node", parse_nodes)

    # ------------------------------------------------------------------ compact reads
    async def _job_rows(self, argv: list[str], *, missing_ok: bool = False) -> list[compact.JobRow]:
        result = await self.runner.run(argv)
        if result.returncode != 0:
            error = classify_text(result.text, f"{' '.join(argv[:2])}: ")
            if missing_ok and isinstance(error, JobNotFound):
                return []
            raise error
        return compact.parse_job_rows(result.stdout)

    async def _read_owner_fields(self, row: compact.JobRow) -> OwnerFields:
        """The owner-written fields of one job: one field per ``squeue`` (22.05, where
        ``--json`` ignores ``--jobs``), or that job's ``scontrol show job --json`` (23.02+)."""
        if (await self.version())[0] >= 23:
            doc = await self._json(await self._show_json("job", row.query_id))
            for raw in doc.get("jobs") or []:
                if isinstance(raw, dict) and str(raw.get("job_id")) == row.job_id:
                    await self._read_output_patterns([raw])
                    return {key: raw.get(key) for key in (*compact.OWNER_FIELDS, "admin_comment")}
            raise JobNotFound(f"job {row.job_id} left slurmctld while being read")
        fields = list(compact.OWNER_FIELDS)
        results = await asyncio.gather(
            *(self.runner.check(compact.owner_field_argv(row.query_id, f)) for f in fields)
        )
        # AdminComment (resurrect's hold mark) is left out: read_admin_comment reads it
        owner = {
            f: compact.owner_field_value(f, r.stdout) for f, r in zip(fields, results, strict=True)
        }
        for field in ("standard_output", "standard_error"):
            owner[field] = compact.output_pattern(
                owner[field],
                job_id=row.job_id,
                array_task=row.array_task,
                work_dir=owner["current_working_directory"],
            )
        return owner

    async def read_admin_comment(self, job_id: str) -> str:
        """On 23.02+ it comes with :meth:`get_job`; on 22.05 (no squeue column for it, and
        ``scontrol show job`` prints it after the job name, command and working directory,
        which its owner chooses and may fill with look-alike text and newlines) from the
        whole ``squeue --json``, where Slurm itself delimits it."""
        if (await self.version())[0] >= 23:
            return await super().read_admin_comment(job_id)
        jid = validate_job_id(job_id)
        for raw in (await self._json(["squeue", "--json"])).get("jobs") or []:
            if isinstance(raw, dict) and str(raw.get("job_id")) == jid:
                comment = raw.get("admin_comment")
                return comment if isinstance(comment, str) else ""
        raise JobNotFound(f"job {jid} not known to slurmctld of {self.cluster_name}")

    async def _bulk_owner_fields(self) -> dict[str, OwnerFields]:
        """Owner-written fields of every job, from one full JSON read."""
        major = (await self.version())[0]
        argv = ["squeue", "--json"] if major < 23 else await self._show_json("job")
        doc = await self._json(argv)
        if major >= 23:
            await self._read_output_patterns(doc.get("jobs"))
        out: dict[str, OwnerFields] = {}
        for raw in doc.get("jobs") or []:
            if isinstance(raw, dict) and "job_id" in raw:
                out[str(raw.get("job_id"))] = {
                    k: raw.get(k) for k in (*compact.OWNER_FIELDS, "admin_comment")
                }
        return out

    async def _read_output_patterns(self, jobs: Any) -> None:
        """Put the output patterns, read by ``squeue -O STDOUT:0`` / ``STDERR:0`` (which
        print them as the owner wrote them on every version), in place of the paths
        ``scontrol`` made of them in the 23.02+ job records that cannot be taken as they
        are (:func:`~resurrect.scheduler.slurm_json.client_expanded_paths_unreliable`).
        A job gone meanwhile keeps what the record had."""
        todo = [
            job
            for job in (jobs if isinstance(jobs, list) else [])
            if isinstance(job, dict)
            and number(job.get("job_id")) is not None
            and client_expanded_paths_unreliable(job)
        ]
        gate = asyncio.Semaphore(OWNER_READS_AT_ONCE)

        async def read(job: JsonObj) -> None:
            try:
                await read_one(job)
            except Exception as exc:  # that job's data: its record stays as it was
                compact.note_unreadable(
                    str(number(job.get("job_id"))),
                    f"output pattern not read: {why_unreadable(exc)}",
                )

        async def read_one(job: JsonObj) -> None:
            array_job, task = array_ids(job)
            job_id = f"{array_job}_{task}" if task else str(number(job.get("job_id")))
            fields = ("standard_output", "standard_error")
            async with gate:
                results = await asyncio.gather(
                    *(self.runner.run(compact.owner_field_argv(job_id, f)) for f in fields)
                )
            if all(r.returncode == 0 and r.stdout for r in results):
                for field, result in zip(fields, results, strict=True):
                    job[field] = compact.output_pattern(
                        compact.owner_field_value(field, result.stdout),
                        job_id=str(number(job.get("job_id"))),
                        array_task=task,
                        work_dir=str(job.get("current_working_directory") or ""),
                    )

        await asyncio.gather(*(read(job) for job in todo))

    def _job_info(self, row: compact.JobRow, owner: OwnerFields) -> JobInfo:
        try:
            return parse_job({**row.json_fields(), **owner}, self._naming)
        except Exception as exc:  # the job's own data: the caller leaves it out
            raise SchedulerError(f"cannot read job {row.job_id}: {why_unreadable(exc)}") from exc

    async def list_active_jobs(self, also: Collection[str] = ()) -> list[JobInfo]:
        """Running, suspended and recently failed jobs, and the jobs ``also`` names in any
        state: what a watcher must see, at a cost that does not grow with the queue.

        Owner-written fields are read once per job attempt and remembered while the job
        stays in view; a line unchanged since the last call gives the same JobInfo object
        without being parsed again. A job whose record cannot be read is left out (noted).
        """
        argv = compact.job_rows_argv(states=compact.WATCHED_JOB_STATES)
        result = await self.runner.check(argv)
        previous, self._view = self._view, {}
        lines = [line for line in result.stdout.splitlines() if line.strip()]
        ids = [line.split(compact.DELIMITER, 1)[0] for line in lines]
        counts = Counter(ids)
        reused: list[JobInfo] = []
        fresh: list[str] = []
        for job_id, line in zip(ids, lines, strict=True):
            hit = previous.get(job_id)
            if counts[job_id] == 1 and hit is not None and hit[0] == line:
                self._view[job_id] = hit
                reused.append(hit[1])
            else:  # new or changed (a line printed twice is dropped by parse_job_rows)
                fresh.append(line)
        rows = compact.parse_job_rows("\n".join(fresh))
        have = set(ids)
        wanted = sorted(validate_job_id(j) for j in {j for j in also if j not in have})
        extra: list[compact.JobRow] = []
        if wanted:
            extra = await self._job_rows(compact.job_rows_argv(job_ids=wanted), missing_ok=True)
            extra = [row for row in extra if row.job_id not in have]
        live = have | {row.job_id for row in extra}
        if len(self._owner_fields) > len(live):  # forget jobs that left the view
            for key in [key for key in self._owner_fields if key[0] not in live]:
                del self._owner_fields[key]
        await self._learn_owner_fields(rows + extra)
        lines_by_id = dict(zip(ids, lines, strict=True))
        jobs = reused
        for row in rows + extra:
            known = self._owner_fields.get((row.job_id, row.restart_count))
            if known is None:
                continue
            try:
                info = self._job_info(row, known)
            except SchedulerError as exc:
                compact.note_unreadable(row.job_id, str(exc))
                continue
            jobs.append(info)
            if row.job_id in lines_by_id:
                self._view[row.job_id] = (lines_by_id[row.job_id], info)
        return jobs

    async def _learn_owner_fields(self, rows: list[compact.JobRow]) -> None:
        """Read the owner-written fields of the rows whose attempt is not known yet. A job
        whose fields cannot be read is left out of this view (noted) and read again at the
        next call; only an unreachable controller fails the whole read."""
        unknown = [row for row in rows if (row.job_id, row.restart_count) not in self._owner_fields]
        if len(unknown) > BULK_OWNER_READ:
            bulk = await self._bulk_owner_fields()
            for row in unknown:
                if row.job_id in bulk:
                    self._owner_fields[(row.job_id, row.restart_count)] = bulk[row.job_id]
            return
        gate = asyncio.Semaphore(OWNER_READS_AT_ONCE)

        async def read(row: compact.JobRow) -> OwnerFields:
            async with gate:
                return await self._read_owner_fields(row)

        fetched = await asyncio.gather(*(read(row) for row in unknown), return_exceptions=True)
        for row, result in zip(unknown, fetched, strict=True):
            if isinstance(result, JobNotFound):
                continue  # ended and forgotten between the two reads
            if isinstance(result, SchedulerUnavailable) or (
                isinstance(result, BaseException) and not isinstance(result, Exception)
            ):
                raise result
            if isinstance(result, Exception):  # that job's data: it costs that job alone
                compact.note_unreadable(row.job_id, f"fields not read: {why_unreadable(result)}")
                continue
            self._owner_fields[(row.job_id, row.restart_count)] = result

    async def list_held_after_failed_launch(self) -> list[str]:
        """The pending jobs slurmctld held after a failed launch: one ``squeue`` of the
        pending queue printing only each job's id and reason (Slurm's words, none a job
        owner writes)."""
        argv = ["squeue", "-h", "--states=PENDING", "-o", "%i %r"]
        found = []
        for line in (await self.runner.check(argv)).stdout.splitlines():
            job_id, _, reason = line.strip().partition(" ")
            if reason in LAUNCH_FAILED_HELD_REASONS and is_ascii_digits(job_id):
                found.append(job_id)
        return found

    async def list_unhealthy_nodes(self) -> list[NodeInfo]:
        """Nodes that are down, failed, not responding, unknown or future; nothing else."""
        argv = compact.nodes_argv(states=compact.UNHEALTHY_NODE_STATES)
        return compact.parse_node_lines((await self.runner.check(argv)).stdout)

    async def list_nodes_named(self, names: Collection[str]) -> list[NodeInfo]:
        """The nodes of ``names`` that exist, read by name (never every node)."""
        wanted = sorted({validate_node_name(n) for n in names})
        if not wanted:
            return []
        argv = compact.nodes_argv(names=wanted)
        return [
            node
            for node in compact.parse_node_lines((await self.runner.check(argv)).stdout)
            if node.name in wanted
        ]

    async def drain_census(self) -> tuple[int, list[NodeInfo]]:
        """The node count (one short line a node) and the drained nodes, with reasons."""
        names = await self.runner.check(["sinfo", "-h", "-N", "-O", "NodeList:0"])
        total = len(set(names.stdout.split()))
        drained = compact.nodes_argv(states=("drain",))
        nodes = compact.parse_node_lines((await self.runner.check(drained)).stdout)
        return total, [node for node in nodes if node.drained]

    async def get_job(self, job_id: str) -> JobInfo:
        """One job, fresh, read by id (never the whole queue)."""
        jid = validate_job_id(job_id)
        rows = await self._job_rows(compact.job_rows_argv(job_ids=[jid]), missing_ok=True)
        row = next((r for r in rows if r.job_id == jid), None)
        if row is None:
            raise JobNotFound(f"job {jid} not known to slurmctld of {self.cluster_name}")
        return self._job_info(row, await self._read_owner_fields(row))

    async def get_node(self, name: str) -> NodeInfo:
        """One node, read by name (never every node)."""
        node_name = validate_node_name(name)
        argv = compact.nodes_argv(names=[node_name])
        for node in compact.parse_node_lines((await self.runner.check(argv)).stdout):
            if node.name == node_name:
                return node
        raise NodeNotFound(f"node {node_name} not in cluster {self.cluster_name}")

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
