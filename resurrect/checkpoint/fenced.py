"""Checkpoints a fenced attempt wrote after its fence: never resumed from (docs/fencing.md, 3).

A recovery that will requeue attempt ``N`` of a job fences it: from then on that attempt is
dead to resurrect, though a node cut off from the controller may keep it running, and
writing, until its agent kills it. The recovery's checkpoint step records the fence in the
resume hint (:class:`Fence`: the job, the attempt, the time; the hint keeps the last
``MAX_FENCES``). Whoever chooses a checkpoint afterwards - the successor's
:func:`resurrect.checkpoint.resume_path`, the next recovery's ``prepare_resume`` - first marks
every checkpoint written by a fenced attempt after its fence as damaged
(:func:`mark_fenced_writes`): it is never resumed from, and ``prepare_resume`` sets it aside
into the quarantine folder like any damaged checkpoint (moved, with its name and time;
nothing is deleted).

Which attempt wrote a checkpoint is what its resurrect manifest records
(:func:`resurrect.checkpoint.manifest.write_manifest`: the writer's ``SLURM_JOB_ID`` and
``SLURM_RESTART_COUNT``), and when is the manifest's own mtime (written last, once the save
is complete). Both are the job's own word about its own data: a forged one can only make the
job resume from an older checkpoint, or from one of its own. A checkpoint with no such
record is left to the other checks. Write times within ``CLOCK_SKEW_S`` before the fence
count as after it (the file server's clock and the helper's host clock may disagree), so a
recovery records its fence ``CLOCK_SKEW_S`` after the moment it chose: a save completed just
before the fault (a second before it, as a job that dies right after saving does) is never
taken for a fenced write.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from resurrect.checkpoint.fsutil import lstat
from resurrect.checkpoint.manifest import MANIFEST_NAME, read_writer
from resurrect.checkpoint.verify_one import Plan
from resurrect.numbers import is_ascii_digits

MAX_FENCES = 32
CLOCK_SKEW_S = 2.0


@dataclass(frozen=True)
class Fence:
    """Attempts of ``job_id`` up to ``attempt`` were fenced at epoch second ``at``."""

    job_id: str
    attempt: int
    at: float

    def as_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "attempt": self.attempt, "at": self.at}


def fences_from(doc: object) -> list[Fence]:
    """The fences of a hint's ``fences`` list; malformed entries are skipped."""
    found: list[Fence] = []
    for item in doc if isinstance(doc, list) else []:
        if not isinstance(item, dict):
            continue
        job_id, attempt, at = item.get("job_id"), item.get("attempt"), item.get("at")
        if (
            isinstance(job_id, str)
            and is_ascii_digits(job_id)
            and isinstance(attempt, int)
            and not isinstance(attempt, bool)
            and attempt >= 0
            and isinstance(at, int | float)
            and not isinstance(at, bool)
        ):
            found.append(Fence(job_id, attempt, float(at)))
    return found[-MAX_FENCES:]


def with_fence(fences: Sequence[Fence], new: Fence | None) -> list[Fence]:
    """``fences`` and ``new`` (the same job attempt recorded once, at its first time)."""
    kept = list(fences)
    if new is not None and not any(
        f.job_id == new.job_id and f.attempt == new.attempt for f in kept
    ):
        kept.append(new)
    return kept[-MAX_FENCES:]


def written_by(plan: Plan) -> tuple[str, int, float] | None:
    """(job id, attempt, completion time) of a checkpoint, as its manifest records them;
    None when it has no manifest naming its writer."""
    try:
        writer = read_writer(plan.candidate.path)
        written = lstat(plan.candidate.path / MANIFEST_NAME).st_mtime
    except OSError:
        return None
    return None if writer is None else (*writer, written)


def fenced_write(plan: Plan, fences: Iterable[Fence]) -> str | None:
    """Why ``plan``'s checkpoint is a fenced attempt's write after its fence, or None."""
    writer = written_by(plan)
    if writer is None:
        return None
    job_id, attempt, written = writer
    for fence in fences:
        if (
            fence.job_id == job_id
            and attempt <= fence.attempt
            and written > fence.at - CLOCK_SKEW_S
        ):
            when = datetime.fromtimestamp(fence.at, UTC).isoformat(timespec="seconds")
            return (
                f"written by job {job_id} attempt {attempt} after that attempt was fenced"
                f" ({when}): never resumed from"
            )
    return None


def mark_fenced_writes(plans: Iterable[Plan], fences: Sequence[Fence]) -> None:
    """Mark every checkpoint a fenced attempt wrote after its fence as damaged."""
    if not fences:
        return
    for plan in plans:
        if plan.candidate.kind == "missing":
            continue
        reason = fenced_write(plan, fences)
        if reason is not None:
            plan.findings.damage(reason)
