"""The one exception tree of resurrect.

Every error resurrect raises on purpose derives from :class:`ResurrectError`. Callers that
must distinguish retryable from permanent failures (Temporal activities, the CLI) look at
the subclasses below rather than at message text.

Retrying cannot help an error that also derives from :class:`NonRetryable` (marked ``[NR]``
below, subclasses included); :func:`non_retryable_error_types` lists their names for the
workflows' ``RetryPolicy.non_retryable_error_types``, and :func:`failure_of` is the Temporal
failure an activity ends with (named by the error's class, non-retryable when it is
:class:`NonRetryable`). Everything else is retried.

ResurrectError
├── ConfigError [NR]       bad configuration (names the file and the field)
├── RuleError [NR]         a rule pack failed to load or its examples failed (names file+rule)
├── SchedulerError         talking to the scheduler failed
│   ├── SchedulerUnavailable   the controller did not answer (transient: retry)
│   ├── JobNotFound [NR]       no such job
│   ├── NodeNotFound [NR]      no such node
│   ├── NodeNotRegistered      the node has not registered since slurmctld started (retry)
│   ├── InvalidSchedulerArgument [NR]  a node name, job id or reason rejected before use
│   └── SchedulerRefused [NR]  the scheduler said no
│       ├── JobAlreadyPending      the job is pending, the operation needs one that is not
│       ├── JobCompleting          the job's previous run is still being torn down
│       └── JobCancelled           the job was cancelled by a person: never requeue it
├── CheckpointError        a checkpoint root could not be examined at all
├── PolicyError [NR]       a job's opt-in policy could not be parsed
├── JobFileRefused         a job-owned path is not a file resurrect may read (FIFO, ...)
├── NeedsMoreTime          a quick first attempt (a local activity) ran out of its seconds:
│                          the recovery runs it again as an activity task
├── PluginError [NR]       a plugin failed to load, or plugins conflict
│   └── PlanError              a recovery plan file is invalid (names file, plan, step)
└── StepError              raised by recovery steps (plugins) to say how they failed
    ├── PermanentStepError [NR]  do not retry: the step cannot succeed
    └── TransientStepError     retry per the plan's retry policy
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from temporalio.exceptions import ApplicationError


class ResurrectError(Exception):
    """Base of every deliberate resurrect error."""


class NonRetryable(ResurrectError):
    """Marks an error that retrying cannot fix (a second base of the permanent errors)."""


def non_retryable_error_types() -> list[str]:
    """The names of every :class:`NonRetryable` error, for a Temporal ``RetryPolicy``.

    Temporal matches an activity failure's type by its exact class name, so every subclass
    is listed, not only the marked classes.
    """
    names: set[str] = set()
    pending: list[type[BaseException]] = [NonRetryable]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    names.discard(NonRetryable.__name__)
    return sorted(names)


def failure_of(exc: ResurrectError) -> ApplicationError:
    """``exc`` as the failure its activity ends with (raise it ``from exc``): named by its
    class, which the retry policies and the recovery workflow decide on; not retried when it
    is :class:`NonRetryable`; of the ``BENIGN`` category when it is no failure at all
    (:class:`NeedsMoreTime`: the SDK logs it at debug level, without a traceback, and counts
    no failure metric)."""
    # Imported here: the helpers that run as a job's owner import this tree, not Temporal.
    from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

    return ApplicationError(
        str(exc),
        type=type(exc).__name__,
        non_retryable=isinstance(exc, NonRetryable),
        category=(
            ApplicationErrorCategory.BENIGN
            if isinstance(exc, NeedsMoreTime)
            else ApplicationErrorCategory.UNSPECIFIED
        ),
    )


class ConfigError(NonRetryable):
    """Configuration is invalid; the message names the file and the field."""


class SearchAttributesUnregistered(NonRetryable):
    """The Temporal namespace lacks a search attribute resurrect's workflows set: a workflow
    task that upserts it would fail (resurrect/temporal/registration.py)."""


class OtherReleaseServing(NonRetryable):
    """A worker of another resurrect release polls the task queue this worker would serve:
    two releases never serve one queue (docs/upgrading.md)."""


class RuleError(NonRetryable):
    """A rule pack is invalid; the message names the file and the rule."""


class SchedulerError(ResurrectError):
    """A scheduler operation failed."""


class SchedulerUnavailable(SchedulerError):
    """The scheduler did not answer (controller down, timeout). Retrying may help."""


class NodeNotRegistered(SchedulerError):
    """slurmctld does not know the node's state yet (``UNKNOWN``: it has not registered since
    the controller started). Its state cannot be changed reliably until it has; retrying
    helps."""


class JobNotFound(SchedulerError, NonRetryable):
    """The scheduler has no such job."""


class NodeNotFound(SchedulerError, NonRetryable):
    """The scheduler has no such node."""


class SchedulerRefused(SchedulerError, NonRetryable):
    """The scheduler refused the operation (e.g. requeue of a --no-requeue job)."""


class InvalidSchedulerArgument(SchedulerError, NonRetryable, ValueError):
    """A node name, job id or reason was rejected before any command ran."""


class JobAlreadyPending(SchedulerRefused):
    """The operation needs a job that is not pending, and it is pending (e.g. requeue-hold
    of a job that slurmctld has just requeued itself): hold it instead."""


class JobCompleting(SchedulerRefused):
    """The job is completing (its previous run's processes are still being torn down), or
    has just completed; an operation refused for that may succeed once it is over."""


class JobCancelled(SchedulerRefused):
    """The job was cancelled (``scancel`` by its owner or an administrator) during a
    recovery: it must not be requeued."""


class CheckpointError(ResurrectError):
    """A checkpoint root could not be examined."""


class PolicyError(NonRetryable):
    """A job's policy (its opt-in comment) is malformed."""


class JobFileRefused(ResurrectError):
    """A job-owned path is not something resurrect will read: not a regular file (a FIFO,
    a device, a symlink ...) or not the job owner's. The message is the note to show."""


class NeedsMoreTime(ResurrectError):
    """A first attempt given only a few seconds (``quick_s``: a local activity in the
    recovery's own workflow task) could not finish in them: the job is not running yet, a
    checkpoint takes longer to read, an agent has to be waited for. Not a failure: the
    recovery runs the same call again as an activity task, with its full time."""


class PluginError(NonRetryable):
    """A plugin failed to load, or two plugins claim one name."""


class PlanError(PluginError):
    """A recovery plan file is invalid; the message names the file, the plan and the step."""


class StepError(ResurrectError):
    """Base of the errors a recovery step raises on purpose."""


class PermanentStepError(StepError, NonRetryable):
    """The step cannot succeed; retrying is pointless. The plan's ``on_failure`` applies."""


class TransientStepError(StepError):
    """The step failed this time; it is retried per the plan's retry policy."""


class StackDumpError(ResurrectError):
    """A rank's stack could not be read (py-spy missing, timed out, or refused)."""
