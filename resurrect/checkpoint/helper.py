"""``python -m resurrect.checkpoint.helper``: checkpoint work as the job's owner.

The service starts this process (argv list, cwd ``/``, minimal environment) for every
verification of a job's checkpoint directory. It reads one JSON request
(:class:`HelperRequest`) from stdin, then, before it opens anything in the directory,
drops to the job owner's uid, gid and groups (``setgroups``/``setgid``/``setuid``) when it
runs as root, so the kernel allows exactly what the owner could do, and caps its address
space and CPU time (:func:`cpu_limit_s`). It then verifies (and
in ``prepare`` mode quarantines, marks, rewrites the tracker, writes the hint) with the
same rules as in-process use: no symlink followed, regular files only, bounded reads. It
writes JSON lines to stdout: ``{"progress": "..."}`` while it works, then one
``{"verdict": {...}}`` (or ``{"error": "..."}``). The parent kills it at its deadline.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from resurrect.checkpoint.fenced import CLOCK_SKEW_S, Fence
from resurrect.checkpoint.limits import VerifyLimits
from resurrect.checkpoint.owner import Owner
from resurrect.checkpoint.prepare import prepare_resume
from resurrect.checkpoint.verify import verify_root
from resurrect.untrusted.privileges import DropFailed, drop_to, limit_resources

#: A request is a few hundred bytes; anything much bigger is not one.
MAX_REQUEST_BYTES = 64 << 10
#: Address-space cap of the helper: unpickling a capped .metadata stays far below it.
MEMORY_LIMIT_BYTES = 8 << 30
#: The helper's CPU seconds when the request names no time budget (a CLI run).
DEFAULT_CPU_S = 3600


class HelperRequest(BaseModel):
    """What the service asks the helper to do."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["verify", "prepare"]
    root: str
    level: Literal["quick", "full"] = "quick"
    act: bool = False
    owner_uid: int | None = Field(default=None, ge=0)
    owner_gid: int | None = Field(default=None, ge=0)
    recent_s: float = Field(default=120.0, ge=0)
    workers: int | None = Field(default=None, ge=1, le=64)
    max_full_file_bytes: int = Field(default=VerifyLimits.max_full_file_bytes, ge=0)
    max_inflated_bytes: int = Field(default=VerifyLimits.max_inflated_bytes, ge=0)
    max_compression_ratio: float = Field(default=VerifyLimits.max_compression_ratio, gt=0)
    time_budget_s: float | None = Field(default=None, gt=0)
    # prepare: the job attempt the recovery will requeue, fenced as of this request
    # (resurrect.checkpoint.fenced); None: no attempt is fenced now
    fence_job_id: str | None = Field(default=None, pattern=r"^[0-9]{1,12}$")
    fence_attempt: int | None = Field(default=None, ge=0)
    # prepare: when the recovery began (epoch seconds); what the quarantine holds from then
    # on is reported as set aside by it
    set_aside_since: float | None = Field(default=None, ge=0)

    @property
    def fence(self) -> Fence | None:
        if self.fence_job_id is None or self.fence_attempt is None:
            return None
        # what is complete now was there when the recovery chose: never a write after the
        # fence, however near (the skew allowance only widens the window after now)
        return Fence(self.fence_job_id, self.fence_attempt, time.time() + CLOCK_SKEW_S)

    @property
    def owner(self) -> Owner | None:
        if self.owner_uid is None or self.owner_gid is None:
            return None
        return Owner(self.owner_uid, self.owner_gid)

    @property
    def limits(self) -> VerifyLimits:
        return VerifyLimits(
            max_full_file_bytes=self.max_full_file_bytes,
            max_inflated_bytes=self.max_inflated_bytes,
            max_compression_ratio=self.max_compression_ratio,
            time_budget_s=self.time_budget_s,
        )


def cpu_limit_s(request: HelperRequest) -> int:
    """The helper's CPU seconds: its time budget on every worker thread (hashing and CRC
    run in parallel), plus one metadata parse; past it the kernel stops it."""
    from resurrect.checkpoint.dcp import METADATA_CPU_S
    from resurrect.checkpoint.manifest import default_workers

    if request.time_budget_s is None:
        return DEFAULT_CPU_S
    workers = request.workers or default_workers()
    return math.ceil(request.time_budget_s * workers + METADATA_CPU_S)


def _emit(doc: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def run(request: HelperRequest) -> dict[str, object]:
    """Do the work of one request (already running as the owner)."""
    root = Path(request.root)

    def progress(line: str) -> None:
        _emit({"progress": line})

    if request.op == "verify":
        verdict = verify_root(
            root,
            request.level,
            progress,
            workers=request.workers,
            recent_s=request.recent_s,
            limits=request.limits,
            owner=request.owner,
        )
    else:
        verdict = prepare_resume(
            root,
            level=request.level,
            act=request.act,
            progress=progress,
            workers=request.workers,
            recent_s=request.recent_s,
            limits=request.limits,
            owner=request.owner,
            fence=request.fence,
            set_aside_since=request.set_aside_since,
        )
    return {"verdict": verdict.model_dump(mode="json")}


def main() -> int:
    raw = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    if len(raw) > MAX_REQUEST_BYTES:
        _emit({"error": "request too large"})
        return 2
    try:
        request = HelperRequest.model_validate_json(raw)
    except ValidationError as exc:
        _emit({"error": f"bad request: {exc.errors()[:1]}"})
        return 2
    try:
        as_who = drop_to(request.owner)
    except (DropFailed, OSError) as exc:
        _emit({"error": f"not run: {exc}"})
        return 3
    os.umask(0o022)
    limit_resources(memory_bytes=MEMORY_LIMIT_BYTES, cpu_s=cpu_limit_s(request))
    _emit({"progress": f"checkpoint helper running as {as_who}"})
    _emit(run(request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
