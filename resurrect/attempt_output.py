"""Where the interrupted attempt's output begins in each of the job's output files.

A requeued job may append every attempt to the same file (``--open-mode=append``, or
``JobFileAppend=1``), so a recovery that read the whole tail would judge earlier attempts'
lines as this one's (name a node the attempt never ran on, miss the one that failed). The
start of an attempt comes from resurrect, never from the job's output, in this order:

1. the files' sizes the recovery of the attempt before recorded while the requeued job was
   pending, its earlier run gone (``RecoveryOutcome.next_attempt_output``): exact;
2. where the log follower began following this attempt (``Interruption.output_marks``,
   taken when it first saw the attempt running): later output of the attempt is all there;
3. neither: the file's tail is read as it is, with a note that it may hold earlier
   attempts' lines.

A first attempt (restart count 0) owns its files from their start: nothing to decide.
Whether a mark still fits the file (the same inode, not beyond its end) is checked where
the file is read (:func:`resurrect.log_reading.read_tail`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from resurrect.contracts import OutputMark


@dataclass
class AttemptOutput:
    """Per file path, where the attempt's output begins (absent: read the tail as it is),
    and notes on files whose start is not known."""

    begins: dict[str, OutputMark] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def attempt_output(
    restart_count: int,
    paths: Sequence[str],
    recorded: Sequence[OutputMark] | None,
    followed: Sequence[OutputMark] = (),
    unrecorded_why: str = "",
) -> AttemptOutput:
    """Where attempt ``restart_count`` begins in each of ``paths``: from ``recorded`` (the
    earlier recovery's marks; None when it could not be read, ``unrecorded_why`` saying
    why), else from ``followed`` (the log follower's), else unknown (a note)."""
    found = AttemptOutput()
    if restart_count == 0:
        return found
    by_recovery = {m.path: m for m in recorded or ()}
    by_follower = {m.path: m for m in followed}
    for path in paths:
        mark = by_recovery.get(path) or by_follower.get(path)
        if mark is not None:
            found.begins[path] = mark
            continue
        why = unrecorded_why or (
            "the recovery of the attempt before recorded no size of it"
            if recorded is not None
            else "no earlier recovery recorded it"
        )
        found.notes.append(
            f"{path}: where attempt {restart_count}'s output begins is not known ({why}; no"
            " log follower report gives it): its tail was read as it is and may hold"
            " earlier attempts' lines"
        )
    return found
