"""A job's recovery policy: the operator's, narrowed by the job's comment."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from resurrect.contracts.base import Contract

RecoveryMode = Literal["observe", "act"]
# What a recovery does about lemon nodes, least to most.
LemonAction = Literal["flag", "exclude", "drain"]


class ProgressPolicy(Contract):
    """How a job's progress is judged: adaptive hang detection and straggler handling.

    A job is suspected hung when its progress (steps, checkpoint writes) stops for longer
    than max(``hang_floor_s``, ``hang_k`` x its recent step interval), or the allowance of
    the phase it is in (start-up, checkpoint save, evaluation). A suspicion is confirmed by
    the ranks' stacks; without stacks, silence past ``hang_unconfirmed_s`` is a hang too.
    A rank slower than its peers by at least the fraction ``straggler_threshold`` (from
    per-rank step times, or from how much its peers wait for it) for ``straggler_duration_s``
    is a straggler; ``straggler_action`` restart acts only when a restart pays off.
    See docs/hangs-and-stragglers.md."""

    hang_detection: bool = True
    hang_floor_s: float = Field(default=5.0, ge=5.0)
    hang_k: float = Field(default=3.0, ge=2.0)
    startup_s: float = Field(default=1800.0, ge=60.0)
    checkpoint_s: float = Field(default=900.0, ge=30.0)
    eval_s: float = Field(default=1800.0, ge=30.0)
    hang_unconfirmed_s: float = Field(default=900.0, ge=60.0)
    straggler_threshold: float = Field(default=0.25, ge=0.05, le=1.0)
    straggler_duration_s: float = Field(default=120.0, ge=10.0)
    straggler_action: Literal["notify", "restart"] = "notify"


class JobPolicy(Contract):
    """A job's recovery policy: the partition's (or the cluster default), narrowed by the
    job's opt-in comment.

    The comment is written by the job's owner, so it may only make recovery *more
    conservative* than the policy the operator configured (:mod:`resurrect.policy` applies
    this, field by field, and notes every request it did not grant):

    ==========================  ==========================================================
    field                       what a comment may do
    ==========================  ==========================================================
    enabled                     opt in (``true`` / an object) or out (``false``); any
                                malformed comment means *not* opted in
    mode                        lower it (``observe``), never raise it to ``act``
    max_restarts                lower it, never raise it above the operator's value
    no_progress_restarts        lower it (stop a restart loop sooner), never raise it
    free_restarts_per_window    lower it, never raise it
    max_free_restarts           lower it, never raise it
    free_restart_window_s       lengthen it, never shorten it
    allow_restart_from_scratch  turn it off, never on
    hang_after_s                turn hang detection on for its own job, or lengthen it;
                                never shorten the operator's value (floor 30 s)
    checkpoint_dir              name it (the job's own files; ownership is checked where
                                it is used)
    notify                      add recipients; the operator's recipients stay
    lemon_action                lower it (``drain`` -> ``exclude`` -> ``flag``), never raise
                                it
    progress                    raise thresholds and allowances, turn hang detection off,
                                ``notify`` instead of ``restart`` for stragglers; never
                                the other way
    ==========================  ==========================================================
    """

    enabled: bool = True
    mode: RecoveryMode | None = None  # None: the cluster's mode
    max_restarts: int = Field(default=3, ge=0, le=1000)
    # A job whose last this many restarts made no progress (no newer checkpoint, no step past
    # the attempt before) is stopped, whatever the fault: a restart loop.
    no_progress_restarts: int = Field(default=3, ge=1, le=1000)
    # Restarts after faults that are not the job's are free, at most this many per window;
    # beyond, they are charged to the job's budget.
    free_restarts_per_window: int = Field(default=10, ge=0, le=1000)
    free_restart_window_s: float = Field(default=24 * 3600.0, gt=0, le=365 * 24 * 3600.0)
    # Free restarts over the job's whole life; beyond, each restart is charged (a job that
    # spaces its interruptions past the window still cannot restart free for ever).
    max_free_restarts: int = Field(default=30, ge=0, le=10000)
    checkpoint_dir: str | None = Field(
        default=None, min_length=1, max_length=4096, pattern=r"^/[^\x00]*$"
    )
    allow_restart_from_scratch: bool = True
    notify: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list, max_length=16
    )
    # A running job whose output and checkpoints stay still this long is hung (None: off).
    hang_after_s: float | None = Field(default=None, ge=30, le=30 * 24 * 3600)
    progress: ProgressPolicy = Field(default_factory=ProgressPolicy)
    # What a recovery of this job does about lemon nodes (docs/lemon-nodes.md): ``flag``
    # them in its notes, also ``exclude`` them from the job's requeue, or also ``drain`` those
    # due (within the drain budget).
    lemon_action: LemonAction = "flag"
