"""The example plugin's steps."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

from pydantic import BaseModel, ConfigDict, Field

from resurrect.sdk import (
    PermanentStepError,
    StepContext,
    StepResult,
    TransientStepError,
    run_health_check,
    step,
)


class WebhookParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://")
    timeout_s: float = Field(default=10.0, gt=0, le=120)


def _post(url: str, body: bytes, timeout: float) -> int:
    request = urllib.request.Request(  # noqa: S310 - the URL scheme is validated as http(s)
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise TransientStepError(f"webhook {url} unreachable: {exc}") from exc


@step("example.webhook", mutating=False)
async def webhook(ctx: StepContext, params: WebhookParams) -> StepResult:
    """POST the incident (job, fault class, culprits, what was done) as JSON to a URL."""
    payload = {
        "workflow_id": ctx.workflow_id,
        "job_id": ctx.job.job_id,
        "user": ctx.job.user,
        "fault_class": ctx.diagnosis.fault_class.value,
        "culprit_hosts": ctx.diagnosis.culprit_hosts,
        "drained_nodes": ctx.state.drained_nodes,
        "requeued": ctx.state.requeued,
        "observe": ctx.observe,
    }
    ctx.heartbeat("posting")
    status = await asyncio.to_thread(
        _post, params.url, json.dumps(payload).encode(), params.timeout_s
    )
    if 400 <= status < 500:
        raise PermanentStepError(f"webhook refused the incident: HTTP {status}")
    if status >= 500:
        raise TransientStepError(f"webhook failed: HTTP {status}")
    return StepResult(detail=f"webhook answered HTTP {status}", data={"status": status})


class ReturnParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The health check, as an argv list; "{node}" is replaced by the node's name.
    check_argv: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=120.0, gt=0, le=3600)


@step("example.return_if_healthy", handles_observe=True)
async def return_if_healthy(ctx: StepContext, params: ReturnParams) -> StepResult:
    """Run the health check on each node this recovery drained; resume those that pass.

    The same check resurrect's own return to service runs (``run_health_check``); this step
    does it at once, inside the recovery, without the repair workflow's cool-down."""
    result = StepResult()
    for node in ctx.state.drained_nodes:
        ctx.heartbeat(f"checking {node}")
        verdict = await run_health_check(params.check_argv, node, params.timeout_s)
        if not verdict.healthy:
            result.notes.append(f"{node}: {verdict.detail}; stays drained")
            continue
        if ctx.observe:
            result.would_have.append(f"would return {node} to service (health check passed)")
            continue
        mutation = await ctx.scheduler.resume_node(node)
        result.notes.append(f"{node}: healthy; {mutation.detail}")
        result.data.setdefault("returned", []).append(node)
    result.detail = "; ".join(result.notes) or "no drained nodes to check"
    return result
