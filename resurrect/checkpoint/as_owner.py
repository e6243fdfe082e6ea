"""Run checkpoint verification in the helper process, as the job's owner, with a deadline.

Every read and write in a job's checkpoint tree goes through here: the service's recovery
step with the owner Slurm names, the CLI (:func:`run_as_tree_owner`) with the owner of the
tree itself, so an operator running ``resurrect checkpoint prepare-resume`` as root leaves
no file the job cannot replace.

:func:`run_helper` starts ``python -m resurrect.checkpoint.helper`` (argv list, its own
session, cwd ``/``, a minimal environment), sends it the request, relays its progress
lines (Temporal heartbeats), and kills its whole process group when the deadline passes
or the caller is cancelled, so no verification work outlives the activity. Whatever goes
wrong in the helper (a crash, garbage on stdout, a timeout) becomes a verdict with
``verified=False`` and a clear note, never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from resurrect.checkpoint.helper import HelperRequest
from resurrect.contracts import CheckpointVerdict
from resurrect.errors import NeedsMoreTime
from resurrect.untrusted.runner import helper_env

#: How much earlier than the hard deadline the helper's own time budget ends, so that it
#: can still report what it checked (the unfinished files noted "not verified fully").
_REPORT_MARGIN = 0.2
_MAX_LINE = 64 << 20
_MAX_STDERR = 16 << 10


def _failed(request: HelperRequest, why: str) -> CheckpointVerdict:
    return CheckpointVerdict(root=request.root, verified=False, note=why)


async def run_helper(
    request: HelperRequest,
    *,
    timeout_s: float,
    progress: Callable[[str], None] | None = None,
    quick_s: float | None = None,
) -> CheckpointVerdict:
    """Run one helper request; the verdict it reports, or an unverified verdict saying why.

    ``quick_s`` (a step's first attempt, a local activity): stop the helper after that many
    seconds and raise NeedsMoreTime, so the step runs again with its whole ``timeout_s``
    (the helper's own time budget stays the one ``timeout_s`` gives: never a lesser check)."""
    if request.time_budget_s is None:
        request = request.model_copy(update={"time_budget_s": timeout_s * (1 - _REPORT_MARGIN)})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-s",
        "-m",
        "resurrect.checkpoint.helper",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd="/",
        env=helper_env(),
        start_new_session=True,
        limit=_MAX_LINE,
    )
    stderr = asyncio.create_task(_tail(proc.stderr))
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(request.model_dump_json().encode())
        await proc.stdin.drain()
        proc.stdin.close()
        limit_s = timeout_s if quick_s is None else min(quick_s, timeout_s)
        try:
            async with asyncio.timeout(limit_s):
                reply = await _read_reply(proc.stdout, progress)
                await proc.wait()
        except TimeoutError:
            if limit_s < timeout_s:
                raise NeedsMoreTime(f"checkpoint not verified within {limit_s:g} s") from None
            return _failed(
                request,
                f"checkpoint verification did not finish within {timeout_s:.0f}s: stopped it; "
                "nothing was verified",
            )
        except (ValueError, asyncio.LimitOverrunError):
            return _failed(request, "checkpoint helper sent an unreadable reply")
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        stderr_text = await stderr
    if "verdict" in reply:
        try:
            return CheckpointVerdict.model_validate(reply["verdict"])
        except ValueError:
            return _failed(request, "checkpoint helper sent a malformed verdict")
    why = str(reply.get("error") or f"exited with status {proc.returncode}")
    detail = stderr_text.strip().splitlines()[-1:] if stderr_text.strip() else []
    return _failed(request, f"checkpoint helper failed: {why}" + "".join(f" ({d})" for d in detail))


#: How long a CLI run may take when the operator gives no limit.
CLI_TIMEOUT_S = 3600.0


def tree_owner(root: Path) -> tuple[int, int] | None:
    """The uid and primary gid of the owner of ``root`` (the entry itself, no link
    followed); None when it cannot be looked at (the helper then says why)."""
    try:
        st = os.lstat(root)
    except OSError:
        return None
    try:
        gid = pwd.getpwuid(st.st_uid).pw_gid
    except KeyError:
        gid = st.st_gid
    return st.st_uid, gid


def run_as_tree_owner(
    op: Literal["verify", "prepare"],
    root: Path,
    *,
    level: Literal["quick", "full"] = "quick",
    act: bool = False,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = CLI_TIMEOUT_S,
) -> CheckpointVerdict:
    """Verify (or prepare) ``root`` in the helper as the tree's owner: the CLI's way in."""
    owner = tree_owner(root)
    request = HelperRequest(
        op=op,
        root=str(root.absolute()),
        level=level,
        act=act,
        owner_uid=None if owner is None else owner[0],
        owner_gid=None if owner is None else owner[1],
    )
    return asyncio.run(run_helper(request, timeout_s=timeout_s, progress=progress))


async def _read_reply(
    stdout: asyncio.StreamReader, progress: Callable[[str], None] | None
) -> dict[str, object]:
    """Relay progress lines; return the final ``verdict``/``error`` object ({} if none)."""
    async for raw in stdout:
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        if "progress" in doc:
            if progress is not None:
                progress(str(doc["progress"])[:500])
            continue
        return doc
    return {}


async def _tail(stream: asyncio.StreamReader | None) -> str:
    """Drain a pipe, keeping only its last bytes (so the helper never blocks on it)."""
    if stream is None:
        return ""
    kept = b""
    while chunk := await stream.read(65536):
        kept = (kept + chunk)[-_MAX_STDERR:]
    return kept.decode("utf-8", errors="replace")
