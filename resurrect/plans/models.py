"""The schema of recovery plan files (YAML), validated by pydantic; unknown fields are errors.

A plan file holds ordered ``plans``; the first whose ``when`` matches the diagnosis wins
(in the spirit of JobSet's failure policy). A plan is a list of ``steps``; a step is either
an activity called by name (with parameters, a timeout, a heartbeat timeout, a retry policy
and what to do when it fails) or ``use: <plan>``, which inlines another plan's steps
(cycles are rejected at load). Example::

    plans:
      - name: lost-hardware
        when: {fault_classes: [gpu.hardware, node.lost], min_confidence: 0.5}
        counts_against_budget: false
        steps:
          - activity: recovery.drain_nodes
          - use: restart-from-checkpoint
      - name: restart-from-checkpoint
        steps:
          - activity: recovery.verify_checkpoint
            timeout_s: 900
            heartbeat_s: 60
          - activity: recovery.requeue_job
          - activity: recovery.wait_running
            timeout_s: 1000
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from resurrect.contracts import FaultClass, RecoveryAction


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetrySpec(Strict):
    """Temporal retry policy of one step. ``max_attempts: 0`` means unlimited."""

    max_attempts: int = Field(default=0, ge=0, le=1000)
    initial_interval_s: float = Field(default=1.0, gt=0)
    backoff: float = Field(default=2.0, ge=1.0)
    max_interval_s: float = Field(default=30.0, gt=0)


class StepSpec(Strict):
    """One step: an activity by name, or ``use`` of another plan."""

    activity: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
    use: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = Field(default=120.0, gt=0, le=24 * 3600)
    heartbeat_s: float | None = Field(default=None, gt=0)
    retry: RetrySpec = Field(default_factory=RetrySpec)
    # Give up on the step after this long, retries included.
    deadline_s: float = Field(default=1800.0, gt=0)
    on_failure: Literal["stop", "continue"] = "stop"
    # The recovery waits for a person (``resurrect approve|deny``) before this step; a
    # denied step is skipped.
    requires_approval: bool = False

    @model_validator(mode="after")
    def _one_kind(self) -> StepSpec:
        if (self.activity is None) == (self.use is None):
            raise ValueError("a step names exactly one of 'activity' or 'use'")
        if self.use is not None and (self.params or "timeout_s" in self.model_fields_set):
            raise ValueError("a 'use' step takes no params or timeouts (the used plan has them)")
        return self


class WhenSpec(Strict):
    """What a plan matches; every given condition must hold (empty = matches everything)."""

    fault_classes: list[FaultClass] | None = None
    actions: list[RecoveryAction] | None = None
    min_confidence: float = Field(default=0.0, ge=0.0, le=1.0)
    culprit_nodes: Literal["any", "some", "none"] = "any"
    partitions: list[str] | None = None
    modes: list[Literal["observe", "act"]] | None = None


class ApprovalSpec(Strict):
    """A plan that waits for a person before its first step (``resurrect approve|deny``).

    ``timeout_s`` and ``on_timeout`` default to the configuration's ``approvals`` section;
    a denied plan ends the recovery with outcome ``denied``, having changed nothing."""

    required: bool = True
    timeout_s: float | None = Field(default=None, gt=0, le=30 * 24 * 3600)
    on_timeout: Literal["approve", "deny"] | None = None


class PlanSpec(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    description: str = ""
    when: WhenSpec = Field(default_factory=WhenSpec)
    # Whether a restart by this plan counts against the job's restart budget
    # (null: the default for the fault class - infrastructure faults are free).
    counts_against_budget: bool | None = None
    approval: ApprovalSpec | None = None
    steps: list[StepSpec]


class PlanFile(Strict):
    version: Literal[1] = 1
    plans: list[PlanSpec]


class ResolvedStep(Strict):
    """A step after ``use`` was inlined: always an activity."""

    activity: str
    params: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float
    heartbeat_s: float | None = None
    retry: RetrySpec
    deadline_s: float
    on_failure: Literal["stop", "continue"]
    from_plan: str
    requires_approval: bool = False
    # The step's code is marked risky (``@step(..., risky=True)``): set by the worker.
    risky: bool = False


class ResolvedPlan(Strict):
    """A plan ready to run: its steps flattened, its origin recorded."""

    name: str
    source: str
    when: WhenSpec
    counts_against_budget: bool | None
    steps: list[ResolvedStep]
    approval: ApprovalSpec | None = None
