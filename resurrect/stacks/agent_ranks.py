"""A job's ranks on a real cluster: their stacks and GPUs read by each node's agent, on request.

:class:`AgentRanks` is the follower's :class:`~resurrect.stacks.collect.RankAccess` where the
ranks run on other machines: ``stacks()`` starts one
:class:`~resurrect.workflows.stack_probe.StackProbeWorkflow` per node of the job, on that
node's agent's task queue, all at once, and joins their answers. A node whose agent does not
answer within the bound contributes no ranks (the verdict then sees ranks missing and
confirms nothing from stacks). ``gpus()`` returns the ranks' latest GPU activity at once and,
at most every ``gpu_every_s``, refreshes it in the background with a probe that reads GPUs
only (no stacks, no pause of the ranks). Per-rank wait sampling needs the ranks' ``/proc``
and is not done remotely (stragglers come from printed step times and GPU clocks there).

``stacks()`` and ``gpus()`` are called from the follower's threads: the workflows are started
on the follower's event loop (``loop``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy

from resurrect.contracts import Evidence, JobInfo
from resurrect.contracts.workflow_ids import stack_probe_workflow_id
from resurrect.sensors.node_agent.gpu_activity import RankGpu
from resurrect.stacks.classify import RankStack
from resurrect.stacks.probe import (
    STACK_PROBE_WORKFLOW,
    StackProbeRequest,
    StackProbeResult,
    agent_task_queue,
)
from resurrect.stacks.sampling import RankWait

log = logging.getLogger(__name__)
_PROBE_NUMBERS = itertools.count(1)


class AgentRanks:
    def __init__(
        self,
        client: Client,
        loop: asyncio.AbstractEventLoop,
        *,
        cluster: str,
        job_id: str,
        restart_count: int | None,
        nodes: Sequence[str],
        owner_uid: int | None = None,
        slurm_conf: str | None = None,
        timeout_s: float = 15.0,
        answer_within_s: float | None = None,
        gpu_every_s: float = 30.0,
    ) -> None:
        self.client = client
        self.loop = loop
        self.cluster = cluster
        self.job_id = job_id
        self.restart_count = restart_count
        self.owner_uid = owner_uid
        self.slurm_conf = slurm_conf
        self.nodes = list(dict.fromkeys(nodes))
        self.timeout_s = timeout_s
        # how long a node's agent has to answer (start, dumps, RAS)
        self.bound_s = answer_within_s or timeout_s * 3 + 20
        self._evidence: list[Evidence] = []
        self.gpu_every_s = gpu_every_s
        self._gpus: list[RankGpu] = []
        self._gpus_asked_at = float("-inf")
        self._gpus_pending: concurrent.futures.Future[list[StackProbeResult | None]] | None = None

    async def _probe(self, node: str, number: int, stacks: bool) -> StackProbeResult | None:
        request = StackProbeRequest(
            cluster=self.cluster,
            node=node,
            job_id=self.job_id,
            owner_uid=self.owner_uid,
            slurm_conf=self.slurm_conf,
            restart_count=self.restart_count,
            timeout_s=self.timeout_s,
            stacks=stacks,
            ras=stacks,
        )
        try:
            result: StackProbeResult = await self.client.execute_workflow(
                STACK_PROBE_WORKFLOW,
                request,
                id=stack_probe_workflow_id(
                    self.cluster, self.job_id, self.restart_count, node, number
                ),
                task_queue=agent_task_queue(self.cluster, node),
                result_type=StackProbeResult,
                execution_timeout=timedelta(seconds=self.bound_s),
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )
        except Exception as exc:  # no agent there, or it failed: judged without this node
            log.warning("stack probe of job %s on %s: no answer (%s)", self.job_id, node, exc)
            return None
        return result

    async def probe_all(self, *, stacks: bool = True) -> list[StackProbeResult | None]:
        number = next(_PROBE_NUMBERS)
        return await asyncio.gather(*(self._probe(n, number, stacks) for n in self.nodes))

    def stacks(self) -> list[RankStack]:
        future = asyncio.run_coroutine_threadsafe(self.probe_all(), self.loop)
        results = future.result(timeout=self.bound_s + 10)
        stacks: list[RankStack] = []
        evidence: list[Evidence] = []
        gpus: list[RankGpu] = []
        for result in results:
            if result is None:
                continue
            stacks.extend(result.stacks())
            evidence.extend(result.evidence)
            gpus.extend(result.rank_gpus())
        self._evidence = evidence
        if gpus:
            self._gpus = gpus
        return stacks

    def evidence(self) -> list[Evidence]:
        """What the last probe found besides the stacks (NCCL RAS, or why not)."""
        return list(self._evidence)

    def waits(self) -> list[RankWait]:
        return []

    def gpus(self) -> list[RankGpu]:
        """The ranks' latest GPU activity; refreshed in the background when it is old."""
        pending = self._gpus_pending
        if pending is not None and pending.done():
            self._gpus_pending = None
            if pending.exception() is None:
                found = [g for r in pending.result() if r is not None for g in r.rank_gpus()]
                self._gpus = found or self._gpus
        now = time.monotonic()
        if self._gpus_pending is None and now - self._gpus_asked_at >= self.gpu_every_s > 0:
            self._gpus_asked_at = now
            coroutine = self.probe_all(stacks=False)
            self._gpus_pending = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return list(self._gpus)


def agent_ranks(
    client: Client,
    loop: asyncio.AbstractEventLoop,
    cluster: str,
    slurm_conf: str | None = None,
) -> Callable[[JobInfo], AgentRanks]:
    """The follower's rank access for ``watcher.stack_probes: agents``: each job's ranks
    through its nodes' agents."""

    def for_job(job: JobInfo) -> AgentRanks:
        return AgentRanks(
            client,
            loop,
            cluster=cluster,
            job_id=job.job_id,
            restart_count=job.restart_count,
            nodes=job.nodes,
            owner_uid=job.user_id,
            slurm_conf=slurm_conf,
        )

    return for_job
