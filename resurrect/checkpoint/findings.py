"""The result of checking one checkpoint, before it becomes a :class:`CheckpointCandidate`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

#: A progress callback: receives one human-readable line (usable as an activity heartbeat).
Progress = Callable[[str], None]

IN_PROGRESS = "save in progress"


@dataclass
class Findings:
    """Problems found in one checkpoint. Empty ``problems`` means intact."""

    problems: list[str] = field(default_factory=list)
    in_progress: bool = False
    checked: list[str] = field(default_factory=list)

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

    @property
    def valid(self) -> bool:
        """True when nothing was found wrong."""
        return not self.problems

    def reason(self) -> str:
        """One line: the problems, or what was checked."""
        if self.problems:
            shown = self.problems[:3]
            more = len(self.problems) - len(shown)
            return "; ".join(shown) + (f" (+{more} more)" if more > 0 else "")
        return "ok: " + ", ".join(self.checked) if self.checked else "ok"
