"""A scheduler whose state is one JSON file, shared by worker processes of any release and the
test that drives them (tests/workflows/test_rolling_upgrade.py).

It is :class:`resurrect.testing.FakeScheduler` (the real check -> act -> verify code over
plain dicts) with every read and primitive done under an exclusive lock on the file: loaded
before, written after. It imports nothing newer than resurrect 0.2.0, because a worker of
that release loads it too, as the backend ``cluster.scheduler: file`` through the entry
point that :func:`install_backend` writes. The state file is named by the environment
variable ``RESURRECT_FILE_SCHEDULER`` (only tests start such workers).

Beside the jobs and nodes, the file counts the reads of each job (``reads``) and holds the
jobs whose requeue-hold is refused as if slurmctld did not answer (``unreachable_requeue``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from resurrect.contracts import JobInfo, NodeInfo
from resurrect.errors import SchedulerUnavailable
from resurrect.testing import FakeScheduler

STATE_ENV = "RESURRECT_FILE_SCHEDULER"
BACKEND = "file"
DIST = "resurrect_file_scheduler-0.dist-info"


class FileScheduler(FakeScheduler):
    """A FakeScheduler whose state lives in ``path`` (JSON), locked for each call."""

    def __init__(self, path: Path, cluster_name: str) -> None:
        super().__init__(cluster_name=cluster_name)
        self.path = path
        self.reads: dict[str, int] = {}
        self.unreachable_requeue: list[str] = []

    # ------------------------------------------------------------------ the file
    @contextlib.contextmanager
    def state(self) -> Iterator[FileScheduler]:
        """Hold the file's lock: the state as stored, written back when the block ends."""
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._load()
                yield self
                self._save()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> None:
        data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.nodes = {n["name"]: NodeInfo.model_validate(n) for n in data.get("nodes", [])}
        self.jobs = {j["job_id"]: JobInfo.model_validate(j) for j in data.get("jobs", [])}
        self.calls = [(a, b) for a, b in data.get("calls", [])]
        self.reads = dict(data.get("reads", {}))
        self.unreachable_requeue = list(data.get("unreachable_requeue", []))

    def _save(self) -> None:
        data = {
            "nodes": [n.model_dump(mode="json") for n in self.nodes.values()],
            "jobs": [j.model_dump(mode="json") for j in self.jobs.values()],
            "calls": self.calls,
            "reads": self.reads,
            "unreachable_requeue": self.unreachable_requeue,
        }
        fresh = self.path.with_suffix(".new")
        fresh.write_text(json.dumps(data))
        fresh.replace(self.path)

    # ------------------------------------------------------------------ reads
    async def list_jobs(self) -> list[JobInfo]:
        with self.state():
            return await super().list_jobs()

    async def get_job(self, job_id: str) -> JobInfo:
        with self.state():
            self.reads[job_id] = self.reads.get(job_id, 0) + 1
        return await super().get_job(job_id)

    async def list_nodes(self) -> list[NodeInfo]:
        with self.state():
            return await super().list_nodes()

    async def read_admin_comment(self, job_id: str) -> str:
        with self.state():
            return await super().read_admin_comment(job_id)

    # ------------------------------------------------------------------ primitives
    async def _act_drain(self, node: str, reason: str) -> None:
        with self.state():
            await super()._act_drain(node, reason)

    async def _act_resume(self, node: str) -> None:
        with self.state():
            await super()._act_resume(node)

    async def _act_hold(self, job_id: str) -> None:
        with self.state():
            await super()._act_hold(job_id)

    async def _act_requeuehold(self, job_id: str) -> None:
        with self.state():
            if job_id in self.unreachable_requeue:
                raise SchedulerUnavailable(f"file: slurmctld does not answer (job {job_id})")
            await super()._act_requeuehold(job_id)

    async def _act_admin_comment(self, job_id: str, text: str) -> None:
        with self.state():
            await super()._act_admin_comment(job_id, text)

    async def _act_exclude(self, job_id: str, nodes: list[str]) -> None:
        with self.state():
            await super()._act_exclude(job_id, nodes)

    async def _act_release(self, job_id: str) -> None:
        with self.state():
            await super()._act_release(job_id)

    async def _act_cancel(self, job_id: str) -> None:
        with self.state():
            await super()._act_cancel(job_id)


def build(cluster: Any, hold_mark_key: Any = None) -> FileScheduler:
    """The backend's factory (``resurrect.schedulers`` entry point ``file``)."""
    scheduler = FileScheduler(Path(os.environ[STATE_ENV]), cluster.name)
    if hold_mark_key is not None:
        scheduler.hold_mark_key = hold_mark_key
    return scheduler


def install_backend(directory: Path) -> Path:
    """Make ``directory`` (put on a worker's PYTHONPATH) provide this module and its entry
    point, for workers of any release; returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "resurrect_file_scheduler.py").write_text(Path(__file__).read_text())
    dist = directory / DIST
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: resurrect-file-scheduler\nVersion: 0\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[resurrect.schedulers]\n{BACKEND} = resurrect_file_scheduler:build\n"
    )
    return directory
