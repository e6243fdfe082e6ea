"""Which nodes were the culprit of which jobs' hangs, within a window.

The job-log follower records the culprit node of every hang it confirms. A node that was
the culprit of hangs of *different* jobs within ``window_s`` (``watcher.hang_suspect_window_s``)
is what an operator should look at: the hang report carries the node's record as
``progress.hang_history`` evidence, and the recovery's decision flags the node as a suspect
(resurrect/plans/decide.py rule 8). The memory is bounded (nodes and jobs per node) and
lives as long as the follower's process.
"""

from __future__ import annotations

from collections import OrderedDict

from resurrect.contracts import Evidence, SignalKind
from resurrect.plans.decide import HANG_HISTORY_RULE

MAX_NODES = 10_000
MAX_JOBS_PER_NODE = 64


class HangCulprits:
    """node -> {job id: when (monotonic seconds) it last hung with this node as culprit}."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._nodes: OrderedDict[str, dict[str, float]] = OrderedDict()

    def record(self, node: str, job_id: str, now: float) -> None:
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
