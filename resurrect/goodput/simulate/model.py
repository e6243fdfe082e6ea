"""What the what-if simulator reads (a cluster, its jobs, the distributions resurrect
recorded), the knobs it turns, and what it answers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from resurrect.errors import ConfigError
from resurrect.goodput.model import Model

Phase = Literal["detection", "recovery", "queue", "startup"]
PHASES: tuple[Phase, ...] = ("detection", "recovery", "queue", "startup")
# Parts of a simulated job's wall time besides the training it keeps.
LOST_PARTS = ("startup", "save", "recompute", "detection", "recovery", "queue")
# Fault classes whose culprit node is drained (node hardware); other classes restart the job
# and leave its nodes in service.
DRAIN_CLASSES = frozenset({"gpu.hardware", "node.lost", "network.fabric"})
DEFAULT_REPAIR_S = 4 * 3600.0  # a drained node is back, repaired, after this long
DEFAULT_BAD_NODE_S = 120.0  # a faulty node left in service fails its next job this soon
DEFAULT_MANUAL_RESPONSE_S = 1800.0


class SimJob(Model):
    """One training job: how big, when it arrives, how much training it needs, how it saves."""

    job_id: str
    nodes: int = Field(ge=1)
    submit_s: float = Field(default=0.0, ge=0)  # seconds after the period starts
    work_s: float = Field(gt=0)  # training seconds it needs (saves not included)
    checkpoint_interval_s: float = Field(gt=0)  # training between two saves
    save_s: float = Field(default=0.0, ge=0)  # a save blocks training this long


class RecordedFault(Model):
    """One recorded interruption, replayed: when in its attempt, what, and what it cost."""

    after_s: float = Field(ge=0)  # attempt start until the fault
    fault_class: str
    lost_work_s: float | None = Field(default=None, ge=0)  # training redone after it
    detection_s: float = Field(ge=0)
    recovery_s: float = Field(ge=0)
    queue_s: float = Field(ge=0)
    next_startup_s: float = Field(ge=0)


class Replay(Model):
    """A recorded period's interruptions per job (attempt order) and first start-ups."""

    faults: dict[str, list[RecordedFault]] = Field(default_factory=dict)
    first_startup_s: dict[str, float] = Field(default_factory=dict)


class SimInputs(Model):
    """The cluster and the distributions of a recorded period."""

    cluster_nodes: int = Field(ge=1)
    gpus_per_node: int = Field(default=8, ge=1)
    period_s: float = Field(gt=0)
    jobs: list[SimJob]
    rates_per_node_hour: dict[str, float] = Field(default_factory=dict)  # by fault class
    samples_s: dict[Phase, list[float]] = Field(default_factory=dict)  # recorded durations
    drain_budget: int = Field(default=2, ge=0)  # drains per drain window (cluster-wide)
    drain_window_s: float = Field(default=3600.0, gt=0)
    repair_s: float = Field(default=DEFAULT_REPAIR_S, ge=0)
    bad_node_s: float = Field(default=DEFAULT_BAD_NODE_S, gt=0)
    replay: Replay | None = None  # set: replay these interruptions instead of drawing them
    notes: list[str] = Field(default_factory=list)


class WhatIf(Model):
    """The knobs; unset ones keep what was recorded."""

    detect_s: float | None = Field(default=None, ge=0)
    checkpoint_interval_s: float | None = Field(default=None, gt=0)
    drain_budget: int | None = Field(default=None, ge=0)
    spares: int = Field(default=0, ge=0)
    manual_response_s: float = Field(default=DEFAULT_MANUAL_RESPONSE_S, ge=0)

    @classmethod
    def parse(cls, text: str | None) -> WhatIf:
        """``detect_s=10,checkpoint_interval_s=1800,...`` (the CLI's ``--what-if``)."""
        if not text:
            return cls()
        values: dict[str, str] = {}
        for item in text.split(","):
            key, sep, value = item.strip().partition("=")
            if not sep or not key or key in values:
                raise ConfigError(f"--what-if takes k=v,... once each (got {item!r})")
            if key not in cls.model_fields:
                raise ConfigError(
                    f"unknown what-if knob {key!r}: one of {sorted(cls.model_fields)}"
                )
            values[key] = value
        try:
            return cls.model_validate(values)
        except ValueError as exc:
            raise ConfigError(f"bad --what-if: {exc}") from exc


Mode = Literal["recorded", "what-if", "manual"]


class ScenarioResult(Model):
    scenario: Mode
    knobs: WhatIf
    goodput: float | None  # training kept / wall, over every job (node-weighted)
    # (training + the saves it kept) / wall: what the goodput report measures, since a
    # job's progress lines go on across its saves
    goodput_with_saves: float | None
    lost_gpu_hours: float
    lost_node_hours_by_part: dict[str, float]
    time_to_train_s: float | None  # mean submission to completion of the finished jobs
    jobs_finished: int
    jobs_unfinished: int  # still training at the horizon
    interruptions: int
    drains: int
    drains_refused: int  # over the drain budget: the node stayed in service


class SimResult(Model):
    seed: int
    replications: int
    period_s: float
    cluster_nodes: int
    jobs: int
    scenarios: list[ScenarioResult]
    notes: list[str] = Field(default_factory=list)
