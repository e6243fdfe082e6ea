"""Recovery steps: the ``@step`` decorator, the context a step gets, and turning a step
into a Temporal activity.

A step is ``async def fn(ctx: StepContext, params: P) -> StepResult | str | None`` where
``P`` is a pydantic model of its parameters (or ``None`` for none). ``@step`` only attaches
metadata, so a test can call the function directly; :func:`make_activity` binds it to a
:class:`StepRuntime` (scheduler, config, Temporal client) and wraps it as an activity whose
input is a :class:`~resurrect.contracts.StepInput`:

* the plan's ``params`` are validated against ``P`` (invalid: a permanent failure);
* in observe mode a ``mutating`` step is not called, and records what it would have done,
  unless it declared ``handles_observe=True`` and describes that itself;
* :class:`PermanentStepError` becomes a non-retryable failure, :class:`TransientStepError`
  (and any other exception) a retryable one; Temporal applies the plan's retry policy;
* ``ctx.heartbeat()`` reports liveness, so a hung step is cut by its heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast, get_type_hints

from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    Diagnosis,
    JobInfo,
    RecoveryDecision,
    RecoveryState,
    StepInput,
    StepResult,
)
from resurrect.errors import NeedsMoreTime, PermanentStepError, PluginError, failure_of
from resurrect.scheduler.base import Scheduler

StepFn = Callable[..., Awaitable[StepResult | str | None]]
F = TypeVar("F", bound=StepFn)

STEP_ATTR = "__resurrect_step__"


@dataclass(frozen=True)
class StepMeta:
    """What ``@step`` records about a step function."""

    name: str
    params: type[BaseModel] | None
    mutating: bool
    handles_observe: bool
    description: str
    risky: bool = False
    quick: bool = False


def _params_model(fn: StepFn) -> type[BaseModel] | None:
    parameters = list(inspect.signature(fn).parameters.values())
    if len(parameters) != 2:
        raise PluginError(
            f"step {fn.__qualname__} must take (ctx, params), not {len(parameters)} arguments"
        )
    hints = get_type_hints(fn)
    annotation = hints.get(parameters[1].name)
    if annotation is None or annotation is type(None):
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    raise PluginError(
        f"step {fn.__qualname__}: annotate its params argument"
        " with a pydantic model (or None for no params)"
    )


_PART = re.compile(r"[a-z][a-z0-9_]*")


def step(
    name: str,
    *,
    mutating: bool = True,
    handles_observe: bool = False,
    risky: bool = False,
    quick: bool = False,
) -> Callable[[F], F]:
    """Mark ``fn`` as the recovery step ``name``: its full activity name, as plans call it,
    ``<namespace>.<step>`` (``recovery.drain_nodes``, ``oncall.page``); a plugin's steps
    use the plugin's name as their namespace.

    ``mutating``: the step changes something (a node, a job, the outside world); in observe
    mode it is skipped and its would-be call recorded, unless ``handles_observe`` says the
    step checks ``ctx.observe`` and describes what it would do itself. ``risky``: a recovery
    waits for a person's approval before running it (``approvals.risky_steps``). ``quick``:
    the step usually finishes within seconds and may run again from its start (it checks
    before it acts), so the recovery tries it first as a Temporal local activity (in the
    worker that runs the recovery: a marker in the history instead of an activity task; no
    heartbeats) given ``ctx.quick_s`` seconds; a step that needs longer raises
    :class:`~resurrect.errors.NeedsMoreTime` (or is cut at the local timeout) and is run again
    as an activity task under the plan's timeouts and retry policy. Leave it False for
    anything that must not repeat or waits on a workflow (a query, an update): a local
    activity holds a workflow-task slot of its worker while it runs.
    """
    namespace, dot, short = name.partition(".")
    if not (dot and _PART.fullmatch(namespace) and _PART.fullmatch(short)):
        raise PluginError(
            f"step name {name!r}: use <namespace>.<step> (e.g. 'recovery.drain_nodes'),"
            " each of lower_case letters, digits and underscores"
        )

    def mark(fn: F) -> F:
        if not inspect.iscoroutinefunction(cast(Any, fn)):
            raise PluginError(f"step {name}: {fn.__qualname__} must be an async function")
        meta = StepMeta(
            name=name,
            params=_params_model(fn),
            mutating=mutating,
            handles_observe=handles_observe,
            risky=risky,
            quick=quick,
            description=(inspect.getdoc(fn) or "").split("\n", 1)[0],
        )
        setattr(fn, STEP_ATTR, meta)
        return fn

    return mark


def step_meta(fn: object) -> StepMeta:
    meta = getattr(fn, STEP_ATTR, None)
    if not isinstance(meta, StepMeta):
        raise PluginError(f"{fn!r} is not a recovery step (decorate it with @step)")
    return meta


@dataclass
class StepRuntime:
    """What the worker gives every step."""

    scheduler: Scheduler
    config: ResurrectConfig
    client: Client | None = None
    plugin_settings: dict[str, Any] | None = None


class StepContext:
    """What a step can use: the recovery, the scheduler, a logger, heartbeats, the mode."""

    def __init__(
        self,
        step_input: StepInput,
        runtime: StepRuntime,
        *,
        settings: dict[str, Any] | None = None,
        heartbeat: Callable[..., None] | None = None,
    ) -> None:
        self.input = step_input
        self.scheduler = runtime.scheduler
        self.config = runtime.config
        self.client = runtime.client
        self.settings: dict[str, Any] = settings or {}
        self._heartbeat = heartbeat
        # Steps often hand work to a thread (asyncio.to_thread); a heartbeat from there must
        # be delivered on the activity's event loop, in the activity's context.
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._context = contextvars.copy_context()
        base = logging.getLogger(f"resurrect.step.{step_input.activity}")
        self.log = logging.LoggerAdapter(base, {"workflow_id": step_input.workflow_id})

    @property
    def observe(self) -> bool:
        """True in observe mode: change nothing, say what you would do."""
        return self.input.observe

    @property
    def job(self) -> JobInfo:
        """The job as the scheduler showed it when the recovery gathered evidence."""
        return self.input.bundle.job

    @property
    def diagnosis(self) -> Diagnosis:
        return self.input.diagnosis

    @property
    def decision(self) -> RecoveryDecision:
        """Nodes to drain and exclude, whether the restart is charged, the reasons."""
        return self.input.decision

    @property
    def state(self) -> RecoveryState:
        """What earlier steps of this recovery did."""
        return self.input.state

    @property
    def workflow_id(self) -> str:
        """The recovery's workflow id (``recover/<cluster>/<job>/<restart>``)."""
        return self.input.workflow_id

    @property
    def quick_s(self) -> float | None:
        """Set on a quick step's first attempt (a local activity): finish within this many
        seconds or raise :class:`~resurrect.errors.NeedsMoreTime`; None: the step's whole
        time (an activity task)."""
        return self.input.quick_s

    def heartbeat(self, *details: object) -> None:
        """Report liveness (and progress); a step that stops calling this is cut.

        Safe to call from a thread the step started (e.g. with ``asyncio.to_thread``). A first
        attempt run as a local activity has no heartbeat (its worker runs the recovery too).
        """
        if self._heartbeat is None or self.input.quick_s is not None:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._loop is None or running is self._loop:
            self._heartbeat(*details)
        else:
            self._loop.call_soon_threadsafe(self._heartbeat, *details, context=self._context)


def _as_result(value: StepResult | str | None) -> StepResult:
    if isinstance(value, StepResult):
        return value
    return StepResult(detail=value or "")


async def call_step(
    fn: StepFn, step_input: StepInput, runtime: StepRuntime, **ctx_args: Any
) -> StepResult:
    """Validate params, honour observe mode, call the step; errors keep their types."""
    meta = step_meta(fn)
    params: BaseModel | None = None
    if meta.params is not None:
        try:
            params = meta.params.model_validate(step_input.params)
        except ValidationError as exc:
            raise PermanentStepError(f"{step_input.activity}: invalid params: {exc}") from exc
    elif step_input.params:
        raise PermanentStepError(
            f"{step_input.activity}: takes no params, got {sorted(step_input.params)}"
        )
    if step_input.observe and meta.mutating and not meta.handles_observe:
        shown = ", ".join(f"{k}={v!r}" for k, v in step_input.params.items())
        return StepResult(
            detail="observe mode: not run", would_have=[f"would run {step_input.activity}({shown})"]
        )
    ctx = StepContext(step_input, runtime, **ctx_args)
    return _as_result(await fn(ctx, params))


async def _keep_alive(timeout_s: float) -> None:
    """Heartbeat for a step whose plan set no heartbeat timeout: then the heartbeat only says
    "this worker is alive", so a dead worker's step is retried elsewhere in seconds rather
    than after the whole step timeout. (A plan's ``heartbeat_s`` is the step's own duty.)
    The first beat comes a third of the timeout in: a step done sooner costs the server no
    heartbeat at all (each one is a write of the workflow's state)."""
    while True:
        await asyncio.sleep(max(0.5, timeout_s / 3))
        activity.heartbeat()


def make_activity(
    fn: StepFn, runtime: StepRuntime, *, activity_name: str, settings: dict[str, Any] | None = None
) -> Callable[[StepInput], Awaitable[StepResult]]:
    """The Temporal activity that runs step ``fn`` under ``activity_name``."""
    step_meta(fn)  # fail early for undecorated functions

    async def run(step_input: StepInput) -> StepResult:
        pulse = (
            asyncio.create_task(_keep_alive(step_input.liveness_s))
            if step_input.liveness_s
            else None
        )
        try:
            return await call_step(
                fn, step_input, runtime, settings=settings, heartbeat=activity.heartbeat
            )
        except (PermanentStepError, NeedsMoreTime) as exc:
            raise failure_of(exc) from exc
        finally:
            if pulse is not None:
                pulse.cancel()

    run.__name__ = activity_name.replace(".", "_")
    run.__qualname__ = run.__name__
    return cast(
        Callable[[StepInput], Awaitable[StepResult]], activity.defn(name=activity_name)(run)
    )
