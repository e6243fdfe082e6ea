"""Progress signals: the training steps a job reports in its own output, with their times.

A progress line names a step and carries a timestamp with a time zone, e.g. what the
example job (examples/train/train.py) prints::

    [rank0] step 40/120 loss 0.0213 t=2026-11-30T05:52:58.123+00:00
    [rank0] resumed from /ckpt/step_40 at step 40 t=2026-11-30T05:53:10.002+00:00
    [rank0] checkpoint /ckpt/step_40 t=2026-11-30T05:52:59.480+00:00

Checkpoint saves are read from the lines trainers print around them: a save starting
(``saving checkpoint at iteration 100``, ``Saving the checkpoint``, ``Saving model
checkpoint``) and a save done (``successfully saved checkpoint from iteration 100``,
``Finished saving the checkpoint ... in 3.00 seconds``, the example job's ``checkpoint
/ckpt/step_40``), each with its zoned time; :func:`save_durations` pairs them.

Only rank 0 counts when a line names a rank. Job output is hostile: lines are bounded, a
timestamp without a zone is ignored (it could mean any zone), and the accounting only keeps
marks inside the attempt's own time window with steps that never go back, so a job can at
worst misstate its own goodput.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from resurrect.errors import JobFileRefused
from resurrect.goodput.model import ProgressMark, SaveMark
from resurrect.log_reading import Budget, open_job_file, read_data

log = logging.getLogger(__name__)
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
MAX_LINE_CHARS = 4096
READ_DEADLINE_S = 10.0  # a slow file system cannot hold a report longer than this
_RANK = re.compile(r"\[rank([0-9]{1,6})\]")
_RESUMED = re.compile(r"\bresumed from \S{1,4096} at step ([0-9]{1,12})\b")
_STEP = re.compile(r"\bstep[ =:]{0,2}([0-9]{1,12})\b", re.IGNORECASE)
_SAVE_DONE = re.compile(
    r"\b(?:successfully saved checkpoint|saved checkpoint|checkpoint saved|finished saving)\b"
    r"|^(?:\[rank[0-9]{1,6}\]:?\s{0,4})?checkpoint\s{1,4}\S",
    re.IGNORECASE,
)
_SAVE_START = re.compile(r"\bsaving (?:the |model )?checkpoint\b", re.IGNORECASE)
_SAVE_STEP = re.compile(
    r"(?:\bstep_|\biteration\s{1,20}|\bcheckpoint-|\bglobal_step)([0-9]{1,12})\b", re.IGNORECASE
)
_STATED_SECONDS = re.compile(
    r"\bin ([0-9]{1,9}(?:\.[0-9]{1,9})?) ?(?:s|sec|seconds)\b", re.IGNORECASE
)
_STAMP = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})[T ]([0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?)"
    r"(Z|[+-][0-9]{2}:?[0-9]{2})"
)


@dataclass(frozen=True)
class Resume:
    """The job said it resumed from ``step`` (0: from scratch) at ``at``."""

    step: int
    at: datetime


@dataclass(frozen=True)
class Progress:
    marks: list[ProgressMark]
    resumes: list[Resume]
    saves: list[SaveMark] = field(default_factory=list)


def _stamp(line: str) -> datetime | None:
    match = _STAMP.search(line)
    if match is None:
        return None
    date, clock, zone = match.groups()
    fraction = ""
    if "." in clock:
        clock, digits = clock.split(".", 1)
        fraction = "." + digits[:6]
    zone = "+00:00" if zone == "Z" else zone
    if len(zone) == 5:
        zone = zone[:3] + ":" + zone[3:]
    try:
        return datetime.fromisoformat(f"{date}T{clock}{fraction}{zone}").astimezone(UTC)
    except ValueError:
        return None


def parse_progress(lines: Iterable[str]) -> Progress:
    """Progress marks and resume points from output lines (any order of attempts)."""
    marks: list[ProgressMark] = []
    resumes: list[Resume] = []
    saves: list[SaveMark] = []
    for line in lines:
        rank = _RANK.search(line)
        if rank is not None and rank.group(1) != "0":
            continue
        at = _stamp(line)
        if at is None:
            continue
        resumed = _RESUMED.search(line)
        if resumed is not None:
            resumes.append(Resume(step=int(resumed.group(1)), at=at))
            continue
        if "from scratch" in line:
            resumes.append(Resume(step=0, at=at))
            continue
        save = _save_line(line, at)
        if save is not None:
            saves.append(save)
            continue
        step = _STEP.search(line)
        if step is not None:
            marks.append(ProgressMark(step=int(step.group(1)), at=at))
    return Progress(marks=marks, resumes=resumes, saves=saves)


def _save_line(line: str, at: datetime) -> SaveMark | None:
    body = _STAMP.sub("", line).strip()
    if _SAVE_DONE.search(body):
        step = _SAVE_STEP.search(body)
        stated = _STATED_SECONDS.search(body)
        return SaveMark(
            at=at,
            done=True,
            step=int(step.group(1)) if step else None,
            stated_s=float(stated.group(1)) if stated else None,
        )
    if _SAVE_START.search(body):
        step = _SAVE_STEP.search(body)
        return SaveMark(at=at, done=False, step=int(step.group(1)) if step else None)
    return None


def read_output_tail(
    path: Path, max_bytes: int = MAX_OUTPUT_BYTES, *, owner_uid: int | None = None
) -> list[str]:
    """The last ``max_bytes`` of a job's output as lines; [] (and a logged note) for anything
    but a regular file owned by ``owner_uid`` (when known).

    Opened as the log follower opens job output (:func:`resurrect.log_reading.open_job_file`:
    no symlink at the path, never blocking on a FIFO or device, the inode checked is the one
    read); holes are skipped and reading stops at :data:`READ_DEADLINE_S`.
    """
    try:
        fd = open_job_file(path, owner_uid)
    except JobFileRefused as exc:
        log.warning("job output not read: %s", exc)
        return []
    except OSError as exc:
        log.info("cannot read job output %s: %s", path, exc.strerror or exc)
        return []
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        data = read_data(fd, start, size, Budget(deadline=time.monotonic() + READ_DEADLINE_S))
    except OSError as exc:
        log.info("cannot read job output %s: %s", path, exc.strerror or exc)
        return []
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    if start and lines:
        lines = lines[1:]  # the first piece is the end of a line not read whole
    return [raw[:MAX_LINE_CHARS].decode("utf-8", "replace") for raw in lines]


def read_progress(
    path: Path, max_bytes: int = MAX_OUTPUT_BYTES, *, owner_uid: int | None = None
) -> Progress:
    """Progress from the end of a job's output file (nothing when it cannot be read)."""
    return parse_progress(read_output_tail(path, max_bytes, owner_uid=owner_uid))
