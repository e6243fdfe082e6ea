"""The one exception tree of resurrect.

Every error resurrect raises on purpose derives from :class:`ResurrectError`. Callers that
must distinguish retryable from permanent failures (Temporal activities, the CLI) look at
the subclasses below rather than at message text.

ResurrectError
├── ConfigError            bad configuration (names the file and the field)
├── RuleError              a rule pack failed to load or its examples failed (names file+rule)
├── SchedulerError         talking to the scheduler failed
│   ├── SchedulerUnavailable   the controller did not answer (transient: retry)
│   ├── JobNotFound            no such job (permanent)
│   ├── NodeNotFound           no such node (permanent)
│   └── SchedulerRefused       the scheduler said no (permanent unless stated otherwise)
│       └── JobCancelled           the job was cancelled by a person: never requeue it
├── CheckpointError        a checkpoint root could not be examined at all
├── PolicyError            a job's opt-in policy could not be parsed
├── JobFileRefused         a job-owned path is not a file resurrect may read (FIFO, ...)
├── PluginError            a plugin failed to load, or plugins conflict
│   └── PlanError              a recovery plan file is invalid (names file, plan, step)
└── StepError              raised by recovery steps (plugins) to say how they failed
    ├── PermanentStepError     do not retry: the step cannot succeed
    └── TransientStepError     retry per the plan's retry policy
"""

from __future__ import annotations


class ResurrectError(Exception):
    """Base of every deliberate resurrect error."""


class ConfigError(ResurrectError):
    """Configuration is invalid; the message names the file and the field."""


class RuleError(ResurrectError):
    """A rule pack is invalid; the message names the file and the rule."""


class SchedulerError(ResurrectError):
    """A scheduler operation failed."""

    transient: bool = False


class SchedulerUnavailable(SchedulerError):
    """The scheduler did not answer (controller down, timeout). Retrying may help."""

    transient = True


class JobNotFound(SchedulerError):
    """The scheduler has no such job."""


class NodeNotFound(SchedulerError):
    """The scheduler has no such node."""


class SchedulerRefused(SchedulerError):
    """The scheduler refused the operation (e.g. requeue of a --no-requeue job)."""


class JobCancelled(SchedulerRefused):
    """The job was cancelled (``scancel`` by its owner or an administrator) during a
    recovery: it must not be requeued."""


class CheckpointError(ResurrectError):
    """A checkpoint root could not be examined."""


class PolicyError(ResurrectError):
    """A job's policy (its opt-in comment) is malformed."""


class JobFileRefused(ResurrectError):
    """A job-owned path is not something resurrect will read: not a regular file (a FIFO,
    a device, a symlink ...) or not the job owner's. The message is the note to show."""


class PluginError(ResurrectError):
    """A plugin failed to load, or two plugins claim one name."""


class PlanError(PluginError):
    """A recovery plan file is invalid; the message names the file, the plan and the step."""


class StepError(ResurrectError):
    """Base of the errors a recovery step raises on purpose."""


class PermanentStepError(StepError):
    """The step cannot succeed; retrying is pointless. The plan's ``on_failure`` applies."""


class TransientStepError(StepError):
    """The step failed this time; it is retried per the plan's retry policy."""


class StackDumpError(ResurrectError):
    """A rank's stack could not be read (py-spy missing, timed out, or refused)."""
