"""The resurrect plugin SDK: everything a plugin author imports, and nothing else.

A plugin adds recovery steps (scrub a node's NVMe, reset a GPU through the BMC, page the
on-call, open a ticket) that recovery plans can name::

    from pydantic import BaseModel
    from resurrect.sdk import Plugin, StepContext, StepResult, TransientStepError, step

    class PageParams(BaseModel):
        service: str

    @step("oncall.page", mutating=False)
    async def page(ctx: StepContext, params: PageParams) -> StepResult:
        ctx.log.info("paging %s about %s", params.service, ctx.workflow_id)
        ...
        return StepResult(detail="paged")

    PLUGIN = Plugin(name="oncall", steps=[page])

and registers ``PLUGIN`` under the ``resurrect.plugins`` entry-point group; the operator
enables it by name (``plugins.enabled: [oncall]``) and a plan calls ``oncall.page``.
:func:`run_step` and :class:`FakeScheduler` test a step without a cluster. See
``docs/plugins.md``.
"""

from resurrect.contracts import (
    Diagnosis,
    JobInfo,
    NodeInfo,
    RecoveryDecision,
    RecoveryOutcomeKind,
    RecoveryState,
    StepInput,
    StepResult,
)
from resurrect.errors import PermanentStepError, StepError, TransientStepError
from resurrect.operator.health_check import HealthVerdict, run_health_check
from resurrect.scheduler.base import DRAIN_REASON_PREFIX, Scheduler
from resurrect.steps.plugins import Plugin
from resurrect.steps.runtime import StepContext, step
from resurrect.testing.fake_scheduler import FakeScheduler
from resurrect.testing.steps import make_step_input, run_step

__all__ = [
    "DRAIN_REASON_PREFIX",
    "Diagnosis",
    "FakeScheduler",
    "HealthVerdict",
    "JobInfo",
    "NodeInfo",
    "PermanentStepError",
    "Plugin",
    "RecoveryDecision",
    "RecoveryOutcomeKind",
    "RecoveryState",
    "Scheduler",
    "StepContext",
    "StepError",
    "StepInput",
    "StepResult",
    "TransientStepError",
    "make_step_input",
    "run_health_check",
    "run_step",
    "step",
]
