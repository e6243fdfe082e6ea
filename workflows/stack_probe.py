"""StackProbeWorkflow: one node's agent reads where a job's ranks are, on request.

Started by the job-log follower on a suspected hang (:mod:`resurrect.stacks.agent_ranks`),
on the node agent's own task queue (``resurrect-agent/<cluster>/<node>``), where the agent's
worker runs it and its one activity (``agent.dump_stacks``: py-spy on each rank of the job on
that node, as root, bounded; NCCL RAS). No retries: a probe that fails is reported as such
and the follower judges without that node. The result (every rank's stack) stays in the
workflow's history, readable in the Temporal UI.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from resurrect.stacks.probe import (
        DUMP_STACKS_ACTIVITY,
        STACK_PROBE_WORKFLOW,
        StackProbeRequest,
        StackProbeResult,
    )


@workflow.defn(name=STACK_PROBE_WORKFLOW)
class StackProbeWorkflow:
    @workflow.run
    async def run(self, request: StackProbeRequest) -> StackProbeResult:
        result: StackProbeResult = await workflow.execute_activity(
            DUMP_STACKS_ACTIVITY,
            request,
            result_type=StackProbeResult,
            # py-spy calls run in parallel, each bounded; RAS after them
            start_to_close_timeout=timedelta(seconds=request.timeout_s * 3 + 15),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        return result
