"""The progress-rule schema: how a trainer's step lines are recognised, validated by pydantic.

A pack is a YAML mapping::

    pack: trainers
    rules:
      - id: megatron.iteration
        trainer: Megatron-LM
        phase: train                     # train | eval | checkpoint
        literal: ["iteration"]           # a line must contain one (case-insensitive)
        pattern: 'iteration\\s+(?P<step>\\d+)/\\s*(?P<total>\\d+) \\|'
        examples:
          match:
            - text: " iteration      100/  1000 | ... elapsed time per iteration (ms): 1234.5 |"
              step: 100
              total: 1000
              step_time_s: 1.2345
          no_match: ["validation loss at iteration 100"]

Named groups carry meaning and units: ``step``, ``total`` (integers), and at most one step
time: ``step_time_ms``, ``step_time_s``, ``s_per_it`` (seconds per step) or ``it_per_s``
(steps per second). ``eval`` and ``checkpoint`` rules mark the job entering that phase (its
allowance applies until the next training step). A pattern is searched in the line body after
launcher prefixes (``[rank3]:``, ``3: ``) are removed; when it matches several times in one
line (a progress bar redrawn with carriage returns), the last match counts.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import model_validator

from resurrect.rules.models import LineExample, LineExamples, LinePack, LineRule
from resurrect.rules.models import Strict as Strict  # kept: the progress models' base name

STEP_TIME_GROUPS = ("step_time_ms", "step_time_s", "s_per_it", "it_per_s")
KNOWN_GROUPS = frozenset({"step", "total", *STEP_TIME_GROUPS})

Phase = Literal["train", "eval", "checkpoint"]


class ProgressExample(LineExample):
    """A line the rule must match, with what it must read from it (unset: not checked)."""

    step: int | None = None
    total: int | None = None
    step_time_s: float | None = None
    rank: int | None = None


class ProgressExamples(LineExamples[ProgressExample]):
    """A progress rule's examples."""


class ProgressRule(LineRule):
    """One trainer's progress line: what it looks like and what it tells."""

    trainer: str
    phase: Phase = "train"
    examples: ProgressExamples

    @model_validator(mode="after")
    def _groups_known(self) -> Self:
        groups = set(re.compile(self.pattern).groupindex)
        unknown = groups - KNOWN_GROUPS
        if unknown:
            raise ValueError(
                f"unknown named groups {sorted(unknown)}; known: {sorted(KNOWN_GROUPS)}"
            )
        if len(groups & set(STEP_TIME_GROUPS)) > 2:
            raise ValueError("at most two step-time groups (alternatives, e.g. it/s or s/it)")
        return self


class ProgressPack(LinePack[ProgressRule]):
    """One YAML file of progress rules."""
