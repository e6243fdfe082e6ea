"""Which nodes were the culprit of which jobs' hangs, within a window.

The job-log follower records the culprit node of every hang it confirms. A node that was
the culprit of hangs of *different* jobs within ``window_s`` (``watcher.hang_suspect_window_s``)
is what an operator should look at: the hang report carries the node's record as
``progress.hang_history`` evidence, and the recovery's decision flags the node as a suspect
(resurrect/plans/decide.py rule 8).

A hang's culprit names come from its probes; only a name that is one of the job's own nodes
(from Slurm) is recorded, under Slurm's spelling, and names are bounded (length, characters).
The memory is bounded per node (jobs), per job (nodes) and in all, so one job cannot push
other jobs' records out: it can only hold records of nodes it ran on. With a ``path`` (the
follower's: ``<temporal.state_dir>/hang-culprits.json``) each record is appended as one JSON
line (mode 0600) and the file is read at start, so a restarted watcher still knows; the file
is rewritten (atomically) only once it holds many more lines than live records, so a hang
costs one short append. Times are wall-clock seconds.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from resurrect.checkpoint.atomic import write_new_then_rename
from resurrect.contracts import Evidence, SignalKind
from resurrect.evidence_trust import HANG_HISTORY_RULE, match_job_nodes

log = logging.getLogger(__name__)
MAX_FILE_BYTES = 8 << 20

MAX_NODES = 10_000
MAX_JOBS_PER_NODE = 64
MAX_NODES_PER_JOB = 64
MAX_RECORDS = 50_000
MAX_NAME = 64
COMPACT_SLACK = 1_000  # lines beyond the live records before the file is rewritten
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_JOB = re.compile(r"^[0-9]{1,12}(?:_[0-9]{1,12})?$")


class HangCulprits:
    """node -> {job id: when it last hung with this node as culprit}."""

    def __init__(self, window_s: float, path: Path | None = None) -> None:
        self.window_s = window_s
        self.path = path
        self._nodes: OrderedDict[str, dict[str, float]] = OrderedDict()
        self._by_job: dict[str, OrderedDict[str, None]] = {}
        self._records = 0
        self._lines = 0
        self._needs_newline = False
        if path is not None:
            self._load(path)

    # ---------------------------------------------------------------- the file
    def _load(self, path: Path) -> None:
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("hang culprits not read from %s: %s", path, exc)
            return
        if len(raw) > MAX_FILE_BYTES:
            log.warning(
                "hang culprits not read from %s: larger than %d bytes", path, MAX_FILE_BYTES
            )
            self._compact()
            return
        self._needs_newline = bool(raw) and not raw.endswith(b"\n")
        for line in raw.splitlines():
            self._lines += 1
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and {"node", "job", "at"} <= item.keys():
                self._load_one(item["node"], item["job"], item["at"])

    def _load_one(self, node: object, job_id: object, at: object) -> None:
        if (
            isinstance(node, str)
            and _NAME.match(node)
            and isinstance(job_id, str)
            and _JOB.match(job_id)
            and isinstance(at, int | float)
            and not isinstance(at, bool)
        ):
            self._remember(node, job_id, float(at))

    def _append(self, node: str, job_id: str, at: float) -> None:
        if self.path is None:
            return
        line = json.dumps({"node": node, "job": job_id, "at": at}) + "\n"
        if self._needs_newline:
            line = "\n" + line
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError as exc:  # the memory still serves this process
            log.warning("hang culprits not written to %s: %s", self.path, exc)
            return
        self._needs_newline = False
        self._lines += 1
        if self._lines > 2 * self._records + COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        """Rewrite the file with the live records only (atomically)."""
        if self.path is None:
            return
        lines = [
            json.dumps({"node": node, "job": job_id, "at": at}) + "\n"
            for node, jobs in self._nodes.items()
            for job_id, at in jobs.items()
        ]
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_new_then_rename(self.path, "".join(lines).encode(), mode=0o600)
        except OSError as exc:
            log.warning("hang culprits not written to %s: %s", self.path, exc)
            return
        self._lines = len(lines)
        self._needs_newline = False

    # ---------------------------------------------------------------- the memory
    def implicate(
        self, job_id: str, culprit_nodes: Iterable[str], job_nodes: Iterable[str], now: float
    ) -> tuple[list[Evidence], list[str]]:
        """Record a hang of ``job_id`` and its culprit nodes: (each recorded node's record
        as evidence, at most one note for the job on the names not recorded). Only names of
        ``job_nodes`` (the job's nodes, from Slurm) are recorded, under that spelling, at
        most :data:`MAX_NODES_PER_JOB` of them."""
        nodes = list(job_nodes)
        found: list[Evidence] = []
        refused: list[str] = []
        for name in list(dict.fromkeys(culprit_nodes))[:MAX_NODES_PER_JOB]:
            recorded, _ = self.record(name, job_id, now, job_nodes=nodes)
            record = self.evidence(recorded, now) if recorded else None
            if record is not None:
                found.append(record)
            elif recorded is None:
                refused.append(name[:MAX_NAME])
        if not refused:
            return found, []
        shown = ", ".join(repr(n) for n in refused[:3]) + (" ..." if len(refused) > 3 else "")
        return found, [
            f"{len(refused)} hang culprit name(s) not recorded: not among the job's nodes"
            f" (as Slurm names them): {shown}"
        ]

    def record(
        self, node: str, job_id: str, now: float, *, job_nodes: Iterable[str]
    ) -> tuple[str | None, str]:
        """Remember that ``node`` was the culprit of a hang of ``job_id``, only when it is
        one of ``job_nodes`` (the job's nodes, from Slurm): (the node's name as Slurm
        spells it, "") or (None, why not: a note for the job)."""
        if not _JOB.match(job_id):
            return None, f"hang culprit not recorded: not a job id: {job_id[:MAX_NAME]!r}"
        matched, _ = match_job_nodes([node[:256]], job_nodes)
        if not matched or not _NAME.match(matched[0]):
            return None, (
                f"hang culprit {node[:MAX_NAME]!r} not recorded: not one of the job's nodes"
                " (as Slurm names them)"
            )
        self._remember(matched[0], job_id, now)
        self._append(matched[0], job_id, now)
        return matched[0], ""

    def _remember(self, node: str, job_id: str, now: float) -> None:
        jobs = self._nodes.setdefault(node, {})
        self._nodes.move_to_end(node)
        if jobs.pop(job_id, None) is not None:
            self._records -= 1
        jobs[job_id] = now
        self._records += 1
        mine = self._by_job.setdefault(job_id, OrderedDict())
        mine.pop(node, None)
        mine[node] = None
        while len(mine) > MAX_NODES_PER_JOB:  # this job's oldest culprit node
            self._forget(next(iter(mine)), job_id)
        while len(jobs) > MAX_JOBS_PER_NODE:  # the job that hung here longest ago
            self._forget(node, next(iter(jobs)))
        while len(self._nodes) > MAX_NODES or self._records > MAX_RECORDS:
            oldest = next(iter(self._nodes))  # the node implicated longest ago
            for old_job in list(self._nodes[oldest]):
                self._forget(oldest, old_job)

    def _forget(self, node: str, job_id: str) -> None:
        jobs = self._nodes.get(node)
        if jobs is not None and jobs.pop(job_id, None) is not None:
            self._records -= 1
            if not jobs:
                del self._nodes[node]
        mine = self._by_job.get(job_id)
        if mine is not None:
            mine.pop(node, None)
            if not mine:
                del self._by_job[job_id]

    def jobs(self, node: str, now: float) -> list[str]:
        """The jobs whose hangs ``node`` was the culprit of within the window."""
        jobs = self._nodes.get(node, {})
        for job_id in [j for j, at in jobs.items() if now - at > self.window_s]:
            self._forget(node, job_id)
        return sorted(jobs)

    def evidence(self, node: str, now: float) -> Evidence | None:
        """The node's record as evidence for the recovery's decision (None: no record)."""
        jobs = self.jobs(node, now)
        if not jobs:
            return None
        return Evidence(
            kind=SignalKind.PROGRESS,
            text=f"node {node} was the hang culprit of jobs {', '.join(jobs)}"
            f" within the last {self.window_s:.0f} s",
            rule=HANG_HISTORY_RULE,
            role="diagnostic",
            host=node,
            fields={"jobs": ",".join(jobs), "window_s": f"{self.window_s:.0f}"},
            source="sensor",
        )
