"""Plugins used by the tests (importable as entry points: support.test_plugins:NAME)."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from resurrect.sdk import (
    PermanentStepError,
    Plugin,
    StepContext,
    StepResult,
    TransientStepError,
    step,
)

ATTEMPTS: dict[str, int] = {}
MUTATIONS: list[str] = []


class FlakyParams(BaseModel):
    failures: int = 2


@step("testkit.flaky", mutating=False)
async def flaky(ctx: StepContext, params: FlakyParams) -> StepResult:
    """Fails transiently ``failures`` times per recovery, then succeeds."""
    count = ATTEMPTS.get(ctx.workflow_id, 0) + 1
    ATTEMPTS[ctx.workflow_id] = count
    if count <= params.failures:
        raise TransientStepError(f"attempt {count} failed")
    return StepResult(detail=f"succeeded on attempt {count}")


@step("testkit.broken", mutating=False)
async def broken(ctx: StepContext, params: None) -> StepResult:
    raise PermanentStepError("this remedy cannot work here")


@step("testkit.hang", mutating=False)
async def hang(ctx: StepContext, params: None) -> StepResult:
    await asyncio.sleep(3600)  # never heartbeats
    return StepResult()


@step("testkit.mutate")
async def mutate(ctx: StepContext, params: None) -> StepResult:
    MUTATIONS.append(ctx.workflow_id)
    return StepResult(detail="mutated")


@step("other.mutate")
async def other_mutate(ctx: StepContext, params: None) -> StepResult:
    return await mutate(ctx, params)


PLUGIN = Plugin(name="testkit", steps=[flaky, broken, hang, mutate])
OTHER = Plugin(name="other", steps=[other_mutate])
NOT_A_PLUGIN = object()
