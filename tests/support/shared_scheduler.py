"""One in-memory cluster shared by several processes: a :class:`FakeScheduler` served on a
Unix socket, and :class:`RemoteScheduler`, the scheduler each worker process uses.

For tests and benchmarks of several worker processes against one cluster (killing one
mid-burst must not requeue a job twice or drain a node twice). The served scheduler holds
the state and applies the primitives (``_act_drain``, ``_act_requeuehold``, ...); the
check -> act -> verify of :class:`VerifiedScheduler` runs in each worker process, as it
does against Slurm, so two workers racing on one job meet the same checks they would there.

The socket speaks pickle: it is for test processes of one user on one host, never for
anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from resurrect.contracts import JobInfo, NodeInfo
from resurrect.scheduler.verified import VerifiedScheduler
from resurrect.testing.fake_scheduler import FakeScheduler

# What a RemoteScheduler may ask the served one for.
SERVED = frozenset(
    {
        "list_jobs",
        "list_nodes",
        "get_job",
        "get_node",
        "_act_drain",
        "_act_resume",
        "_act_hold",
        "_act_requeuehold",
        "_act_exclude",
        "_act_release",
        "_act_cancel",
        "_act_admin_comment",
    }
)
_LENGTH = struct.Struct("!I")


async def _send(writer: asyncio.StreamWriter, value: object) -> None:
    data = pickle.dumps(value)
    writer.write(_LENGTH.pack(len(data)) + data)
    await writer.drain()


async def _receive(reader: asyncio.StreamReader) -> Any:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return pickle.loads(await reader.readexactly(length))


@contextlib.asynccontextmanager
async def serving(scheduler: FakeScheduler, path: Path) -> AsyncIterator[None]:
    """Serve ``scheduler`` on the Unix socket ``path`` while the block runs."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, args = await _receive(reader)
            if method not in SERVED:
                raise ValueError(f"not served: {method}")
            try:
                await _send(writer, (True, await getattr(scheduler, method)(*args)))
            except Exception as exc:  # the caller gets the scheduler's own error types
                await _send(writer, (False, exc))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the caller died (a worker killed mid-burst)
        finally:
            writer.close()

    server = await asyncio.start_unix_server(answer, path=str(path))
    try:
        yield
    finally:
        server.close()
        await server.wait_closed()


class RemoteScheduler(VerifiedScheduler):
    """The scheduler served on ``path``, with the checks and verifications run here."""

    def __init__(self, path: Path, cluster_name: str) -> None:
        super().__init__(cluster_name, verify_timeout=5.0, poll_interval=0.01)
        self.path = path

    async def _call(self, method: str, *args: object) -> Any:
        reader, writer = await asyncio.open_unix_connection(str(self.path))
        try:
            await _send(writer, (method, args))
            ok, value = await _receive(reader)
        finally:
            writer.close()
        if not ok:
            raise value
        return value

    async def list_jobs(self) -> list[JobInfo]:
        jobs: list[JobInfo] = await self._call("list_jobs")
        return jobs

    async def list_nodes(self) -> list[NodeInfo]:
        nodes: list[NodeInfo] = await self._call("list_nodes")
        return nodes

    async def get_job(self, job_id: str) -> JobInfo:  # one job, not the whole list
        job: JobInfo = await self._call("get_job", job_id)
        return job

    async def get_node(self, name: str) -> NodeInfo:
        node: NodeInfo = await self._call("get_node", name)
        return node

    async def _act_drain(self, node: str, reason: str) -> None:
        await self._call("_act_drain", node, reason)

    async def _act_resume(self, node: str) -> None:
        await self._call("_act_resume", node)

    async def _act_hold(self, job_id: str) -> None:
        await self._call("_act_hold", job_id)

    async def _act_requeuehold(self, job_id: str) -> None:
        await self._call("_act_requeuehold", job_id)

    async def _act_exclude(self, job_id: str, nodes: list[str]) -> None:
        await self._call("_act_exclude", job_id, nodes)

    async def _act_release(self, job_id: str) -> None:
        await self._call("_act_release", job_id)

    async def _act_cancel(self, job_id: str) -> None:
        await self._call("_act_cancel", job_id)

    async def _act_admin_comment(self, job_id: str, text: str) -> None:
        await self._call("_act_admin_comment", job_id, text)
