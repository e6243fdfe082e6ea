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
│       ├── JobAlreadyPending      the job is pending, the operation needs one that is not
│       └── JobCompleting          the job's previous run is still being torn down
├── CheckpointError        a checkpoint root could not be examined at all
├── PolicyError            a job's opt-in policy could not be parsed
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


class SchedulerUnavailable(SchedulerError):
    """The scheduler did not answer (controller down, timeout). Retrying may help."""


class JobNotFound(SchedulerError):
    """The scheduler has no such job."""


class NodeNotFound(SchedulerError):
    """The scheduler has no such node."""


class SchedulerRefused(SchedulerError):
    """The scheduler refused the operation (e.g. requeue of a --no-requeue job)."""


class JobAlreadyPending(SchedulerRefused):
    """The operation needs a job that is not pending, and it is pending (e.g. requeue-hold
    of a job that slurmctld has just requeued itself): hold it instead."""


class JobCompleting(SchedulerRefused):
    """The job is completing (its previous run's processes are still being torn down), or
    has just completed; an operation refused for that may succeed once it is over."""


class CheckpointError(ResurrectError):
    """A checkpoint root could not be examined."""


class PolicyError(ResurrectError):
    """A job's policy (its opt-in comment) is malformed."""


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
