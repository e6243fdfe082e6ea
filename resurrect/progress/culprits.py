"""Which nodes were the culprit of which jobs' hangs, within a window.

The job-log follower records the culprit node of every hang it confirms. A node that was
the culprit of hangs of *different* jobs within ``window_s`` (``watcher.hang_suspect_window_s``)
is what an operator should look at: the hang report carries the node's record as
``progress.hang_history`` evidence, and the recovery's decision flags the node as a suspect
(resurrect/plans/decide.py rule 8). The memory is bounded (nodes and jobs per node); with a
``path`` (the follower's: ``<temporal.state_dir>/hang-culprits.json``) it is written after
each hang (atomically, mode 0600) and read at start, so a restarted watcher still knows.
Times are wall-clock seconds.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from pathlib import Path

from resurrect.checkpoint.atomic import write_new_then_rename
from resurrect.contracts import Evidence, SignalKind
from resurrect.evidence_trust import HANG_HISTORY_RULE

log = logging.getLogger(__name__)
MAX_FILE_BYTES = 8 << 20

MAX_NODES = 10_000
MAX_JOBS_PER_NODE = 64


class HangCulprits:
    """node -> {job id: when it last hung with this node as culprit}."""

    def __init__(self, window_s: float, path: Path | None = None) -> None:
        self.window_s = window_s
        self.path = path
        self._nodes: OrderedDict[str, dict[str, float]] = OrderedDict()
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("hang culprits not read from %s: %s", path, exc)
            return
        try:
            data = json.loads(raw) if len(raw) <= MAX_FILE_BYTES else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            log.warning("hang culprits not read from %s: not a JSON object (or too large)", path)
            return
        for node, jobs in list(data.items())[-MAX_NODES:]:
            if isinstance(node, str) and isinstance(jobs, dict):
                for job_id, at in jobs.items():
                    if isinstance(job_id, str) and isinstance(at, int | float):
                        self._remember(node, job_id, float(at))

    def _save(self) -> None:
        if self.path is None:
            return
        data = json.dumps(self._nodes).encode()
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_new_then_rename(self.path, data, mode=0o600)
        except OSError as exc:  # the memory still serves this process
            log.warning("hang culprits not written to %s: %s", self.path, exc)

    def record(self, node: str, job_id: str, now: float) -> None:
        self._remember(node, job_id, now)
        self._save()

    def _remember(self, node: str, job_id: str, now: float) -> None:
        jobs = self._nodes.setdefault(node, {})
        self._nodes.move_to_end(node)
        jobs.pop(job_id, None)
        jobs[job_id] = now
        while len(jobs) > MAX_JOBS_PER_NODE:  # forget the oldest job
            del jobs[next(iter(jobs))]
        while len(self._nodes) > MAX_NODES:  # forget the node implicated longest ago
            self._nodes.popitem(last=False)

    def jobs(self, node: str, now: float) -> list[str]:
        """The jobs whose hangs ``node`` was the culprit of within the window."""
        jobs = self._nodes.get(node, {})
        for job_id in [j for j, at in jobs.items() if now - at > self.window_s]:
            del jobs[job_id]
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
