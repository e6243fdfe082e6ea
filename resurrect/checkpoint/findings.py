"""The result of checking one checkpoint, before it becomes a :class:`CheckpointCandidate`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

#: A progress callback: receives one human-readable line (usable as an activity heartbeat).
Progress = Callable[[str], None]

IN_PROGRESS = "save in progress"


class CheckLimited(Exception):
    """A full check stopped at a bound (size, inflation, time); the message says which.

    Not damage: the checkpoint keeps its quick-level result (resurrect.checkpoint.limits)."""


@dataclass
class Findings:
    """Problems found in one checkpoint. Empty ``problems`` means intact, or, when
    ``unjudged`` is not empty, loadable but not judged: part of it was not understood (e.g.
    metadata of a PyTorch resurrect does not know) and the checks that could run found nothing."""

    problems: list[str] = field(default_factory=list)
    in_progress: bool = False
    checked: list[str] = field(default_factory=list)
    limited: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)

    def damage(self, reason: str) -> None:
        """Record a damage."""
        self.problems.append(reason)

    def saving(self, detail: str) -> None:
        """Record that the checkpoint is still being written (or its save was torn)."""
        self.in_progress = True
        self.problems.append(f"{IN_PROGRESS}: {detail}")

    def note(self, what: str) -> None:
        """Record a check that passed (for the reason text of intact checkpoints)."""
        if what not in self.checked:
            self.checked.append(what)

    def limit(self, detail: str) -> None:
        """Record a check that was cut short by a bound (see resurrect.checkpoint.limits);
        the checkpoint keeps its quick-level result."""
        if detail not in self.limited:
            self.limited.append(detail)

    def cannot_judge(self, detail: str) -> None:
        """Record a part resurrect does not understand: not damage, but not judged either."""
        if detail not in self.unjudged:
            self.unjudged.append(detail)

    @property
    def valid(self) -> bool:
        """True when nothing was found wrong (the checkpoint may be loaded)."""
        return not self.problems

    @property
    def judged(self) -> bool:
        """False when part of the checkpoint was not understood (see ``unjudged``)."""
        return not self.unjudged

    def reason(self) -> str:
        """One line: the problems, or what was checked."""
        if self.problems:
            shown = self.problems[:3]
            more = len(self.problems) - len(shown)
            return "; ".join(shown) + (f" (+{more} more)" if more > 0 else "")
        text = "ok: " + ", ".join(self.checked) if self.checked else "ok"
        if self.unjudged:
            text = "not judged: " + "; ".join(self.unjudged[:2])
            text += f"; passed: {', '.join(self.checked)}" if self.checked else ""
        if self.limited:
            more = len(self.limited) - 2
            text += "; not verified fully: " + "; ".join(self.limited[:2])
            text += f" (+{more} more)" if more > 0 else ""
        return text
