"""Attempts ended by what an earlier attempt left running, read from Slurm's own lines in a
job's output.

Slurm numbers a requeued job's steps from 0 again. An earlier attempt's ``srun`` that lives
on (a host frozen and thawed, a partition healed before its fence) hears of its node's
failure and cancels "its" step, which is the step of that number the new attempt runs:

    srun: error: Node failure on node3
    srun: Job step aborted: Waiting up to 4 seconds for job step to finish.
    slurmstepd-node5: error: *** STEP 5.0 ON node5 CANCELLED AT 2026-12-04T05:11:30 ***

The soak counts such a requeue against the fault that froze or cut node3 (a fault that hit
the job once may end two of its attempts), and reports how often it happened.
"""

from __future__ import annotations

import re
from pathlib import Path

_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (?P<node>[\w.-]{1,128})\s*$")
_STEP_CANCELLED = re.compile(
    r"\*\*\* STEP [\w.+]{1,40} ON (?P<node>[\w.-]{1,128}) CANCELLED AT [\dT:.-]{10,32} \*\*\*"
)
# the cancellation follows the node failure line within this many lines
WITHIN_LINES = 4
MAX_OUTPUT_BYTES = 4 << 20


def leftover_cancellations(text: str) -> list[tuple[str, str]]:
    """(the node an earlier attempt lost, the node whose step it cancelled) for each step of
    another node cancelled right after an ``srun`` reported a node failure."""
    found: list[tuple[str, str]] = []
    failed: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines()):
        failure = _NODE_FAILURE.match(line)
        if failure is not None:
            failed = (number, failure["node"])
            continue
        cancelled = _STEP_CANCELLED.search(line)
        if (
            cancelled is not None
            and failed is not None
            and number - failed[0] <= WITHIN_LINES
            and cancelled["node"] != failed[1]
        ):
            found.append((failed[1], cancelled["node"]))
            failed = None
    return found


def read_leftover_cancellations(output: Path) -> list[tuple[str, str]]:
    """:func:`leftover_cancellations` of a job's output file (its last 4 MiB; none when it
    cannot be read)."""
    try:
        with output.open("rb") as file:
            size = file.seek(0, 2)
            file.seek(max(0, size - MAX_OUTPUT_BYTES))
            raw = file.read(MAX_OUTPUT_BYTES)
    except OSError:
        return []
    return leftover_cancellations(raw.decode(errors="replace"))
